# Shared helpers for the packaging drivers (install.cmake, consume.cmake).
# Run in script mode (cmake -P); inputs arrive as -D variables.

foreach(_var GRADCOMP_SOURCE_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "packaging driver: -D${_var}=... is required")
  endif()
endforeach()

# Single-config generators take the build type at configure time; an empty
# CONFIG (no CMAKE_BUILD_TYPE in the parent) means Release here.
if(NOT DEFINED CONFIG OR "${CONFIG}" STREQUAL "")
  set(CONFIG Release)
endif()

# Arguments that make a sub-build use the same toolchain as the parent build.
set(GRADCOMP_DRIVER_CONFIGURE_ARGS
  -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${CONFIG}")
if(NOT "${GENERATOR_PLATFORM}" STREQUAL "")
  list(APPEND GRADCOMP_DRIVER_CONFIGURE_ARGS -A "${GENERATOR_PLATFORM}")
endif()
if(NOT "${GENERATOR_TOOLSET}" STREQUAL "")
  list(APPEND GRADCOMP_DRIVER_CONFIGURE_ARGS -T "${GENERATOR_TOOLSET}")
endif()
if(NOT "${MAKE_PROGRAM}" STREQUAL "")
  list(APPEND GRADCOMP_DRIVER_CONFIGURE_ARGS "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()

# Run a command, echo it, and stop the driver (test fails) if it fails.
function(gradcomp_driver_run)
  string(REPLACE ";" " " _pretty "${ARGN}")
  message(STATUS "packaging driver: ${_pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "packaging driver: command failed (${_rc}): ${_pretty}")
  endif()
endfunction()
