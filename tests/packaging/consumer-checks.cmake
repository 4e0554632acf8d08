# Checks shared by the packaging consumer projects. Included by each consumer's
# CMakeLists.txt *before* gradcomp is brought in (it records the global flags),
# then gradcomp_consumer_checks(<target> [GRADCOMP_DIR <dir>]) runs after.

# Global flags before gradcomp is added: gradcomp must not change them.
set(_consumer_flags_before "${CMAKE_CXX_FLAGS}|${CMAKE_EXE_LINKER_FLAGS}|${CMAKE_COMPILE_WARNING_AS_ERROR}")

function(gradcomp_consumer_checks target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "GRADCOMP_DIR" "")

  if(NOT TARGET gradcomp::gradcomp)
    message(FATAL_ERROR "consumer: gradcomp::gradcomp is not defined")
  endif()

  # gradcomp::cuda only where the consumer enabled CUDA itself.
  get_property(_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST _languages AND TARGET gradcomp::cuda)
    message(FATAL_ERROR "consumer: gradcomp::cuda exists although this consumer did not enable CUDA")
  endif()

  # None of the project's own targets may appear in a consumer build.
  foreach(_t gradcomp_tests gradcomp_project_warnings)
    if(TARGET ${_t})
      message(FATAL_ERROR "consumer: gradcomp's internal target '${_t}' is part of the consumer build "
                          "(tests/benchmarks/examples must be off when gradcomp is not top level)")
    endif()
  endforeach()
  if(arg_GRADCOMP_DIR)
    # add_subdirectory / FetchContent: gradcomp must add no sub-directories
    # (tests/, benchmarks/, examples/) and no targets besides the library.
    get_property(_subdirs DIRECTORY "${arg_GRADCOMP_DIR}" PROPERTY SUBDIRECTORIES)
    if(_subdirs)
      message(FATAL_ERROR "consumer: gradcomp added sub-directories in a consumer build: ${_subdirs}")
    endif()
    get_property(_targets DIRECTORY "${arg_GRADCOMP_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
    list(REMOVE_ITEM _targets gradcomp gradcomp_cuda)
    if(_targets)
      message(FATAL_ERROR "consumer: gradcomp defined unexpected targets in a consumer build: ${_targets}")
    endif()
    get_property(_tests DIRECTORY "${arg_GRADCOMP_DIR}" PROPERTY TESTS)
    if(_tests)
      message(FATAL_ERROR "consumer: gradcomp registered tests in a consumer build: ${_tests}")
    endif()
  endif()

  # The library carries usage requirements only: include dir and C++20.
  foreach(_prop INTERFACE_COMPILE_OPTIONS INTERFACE_COMPILE_DEFINITIONS INTERFACE_LINK_OPTIONS)
    get_target_property(_value gradcomp::gradcomp ${_prop})
    if(_value)
      message(FATAL_ERROR "consumer: gradcomp::gradcomp leaks ${_prop}: ${_value}")
    endif()
  endforeach()

  set(_flags_after "${CMAKE_CXX_FLAGS}|${CMAKE_EXE_LINKER_FLAGS}|${CMAKE_COMPILE_WARNING_AS_ERROR}")
  if(NOT _flags_after STREQUAL _consumer_flags_before)
    message(FATAL_ERROR "consumer: global flags changed by gradcomp: '${_consumer_flags_before}' -> '${_flags_after}'")
  endif()

  # main.cpp holds an unused variable: with -Wall it warns, and any -Werror
  # leaked from gradcomp would turn the warning into a build failure.
  # No CMAKE_CXX_STANDARD here: C++20 must come from gradcomp::gradcomp.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang,AppleClang>:-Wall>)

  add_test(NAME ${target} COMMAND ${target})
endfunction()
