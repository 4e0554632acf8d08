# What a consumer is told when it asks an installed gradcomp for what it cannot give (or that
# it gets what it asks for): configures request/ and checks the outcome.
#
#   cmake -DGRADCOMP_SOURCE_DIR=... -DGENERATOR=... -DCXX_COMPILER=... -DCONSUMER_BINARY_DIR=...
#         -DREQUEST="9.9" [-DPREFIX=<install prefix>] [-DTOOLCHAIN=<toolchain file>]
#         [-DLANGUAGES="CXX CUDA" -DCUDA_COMPILER=... -DCUDA_ARCHITECTURES=... [-DCUDA_STANDARD=...]]
#         [-DEXPECT_TARGETS=...] [-DHIDE_CUDA=ON] [-DEXPECT_ERROR=<regex>] -P request.cmake
#
# EXPECT_ERROR: the configure must fail, and its output (whitespace runs made one space, as
# CMake wraps its messages) must match the regex. Without it, the configure must succeed.
# HIDE_CUDA: the configure runs as on a machine without the CUDA toolkit (no nvcc on the PATH,
# CUDACXX and CUDA_PATH unset).

cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/driver-common.cmake")

file(REMOVE_RECURSE "${CONSUMER_BINARY_DIR}")
set(_args ${GRADCOMP_DRIVER_CONFIGURE_ARGS} "-DREQUEST=${REQUEST}")
foreach(_var LANGUAGES EXPECT_TARGETS)
  if(DEFINED ${_var})
    list(APPEND _args "-D${_var}=${${_var}}")
  endif()
endforeach()
if(DEFINED PREFIX AND NOT "${PREFIX}" STREQUAL "")
  list(APPEND _args "-DCMAKE_PREFIX_PATH=${PREFIX}")
endif()
if(DEFINED TOOLCHAIN AND NOT "${TOOLCHAIN}" STREQUAL "")
  list(APPEND _args "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN}")
endif()
if(DEFINED CUDA_COMPILER AND NOT "${CUDA_COMPILER}" STREQUAL "")
  list(APPEND _args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}" "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
endif()
if(DEFINED CUDA_STANDARD AND NOT "${CUDA_STANDARD}" STREQUAL "")
  list(APPEND _args "-DCMAKE_CUDA_STANDARD=${CUDA_STANDARD}")
endif()

if(HIDE_CUDA)
  # CMake looks for nvcc in CUDACXX, CUDA_PATH/bin, on the PATH and in the system's prefixes:
  # every directory of these that holds one is taken off the PATH and ignored by find_*.
  unset(ENV{CUDACXX})
  unset(ENV{CUDA_PATH})
  if(CMAKE_HOST_UNIX)
    string(REPLACE ":" ";" _path "$ENV{PATH}")
    set(_kept "")
    set(_ignored "")
    foreach(_dir IN LISTS _path ITEMS /usr/local/bin /usr/bin /bin /usr/local/cuda/bin /opt/cuda/bin)
      if(EXISTS "${_dir}/nvcc")
        list(APPEND _ignored "${_dir}")
      elseif(_dir IN_LIST _path)
        list(APPEND _kept "${_dir}")
      endif()
    endforeach()
    list(REMOVE_DUPLICATES _kept)
    list(REMOVE_DUPLICATES _ignored)
    string(JOIN ":" _kept ${_kept})
    set(ENV{PATH} "${_kept}")
    file(WRITE "${CONSUMER_BINARY_DIR}-hide-cuda.cmake" "set(CMAKE_IGNORE_PATH \"${_ignored}\" CACHE STRING \"\")\n")
    list(APPEND _args -C "${CONSUMER_BINARY_DIR}-hide-cuda.cmake")
    message(STATUS "request: without the CUDA toolkit: ignoring ${_ignored}")
  endif()
endif()

string(REPLACE ";" " " _pretty "${_args}")
message(STATUS "request: find_package(gradcomp ${REQUEST} CONFIG REQUIRED): cmake ${_pretty}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/request" -B "${CONSUMER_BINARY_DIR}" ${_args}
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
string(REGEX REPLACE "[ \t\r\n]+" " " _flat "${_out}")

if(DEFINED EXPECT_ERROR AND NOT "${EXPECT_ERROR}" STREQUAL "")
  if(_rc EQUAL 0)
    message(FATAL_ERROR "request: the configure succeeded; expected it to fail with: ${EXPECT_ERROR}\n${_out}")
  endif()
  if(NOT _flat MATCHES "${EXPECT_ERROR}")
    message(FATAL_ERROR "request: the configure failed, but without the expected message (${EXPECT_ERROR}):\n${_out}")
  endif()
  message(STATUS "request: failed as expected:\n${_out}")
else()
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "request: the configure failed:\n${_out}")
  endif()
  message(STATUS "request: configured:\n${_out}")
endif()
