# Packaging driver: configure, build and run one consumer project.
#
#   cmake -DGRADCOMP_SOURCE_DIR=... -DCONSUMER_SOURCE_DIR=... -DCONSUMER_BINARY_DIR=...
#         -DGENERATOR=... -DCXX_COMPILER=... [-DCONFIG=...] [-DPREFIX=<install prefix>]
#         [-DCUDA_COMPILER=... -DCUDA_ARCHITECTURES=...] -P consume.cmake
#
# The consumer receives GRADCOMP_SOURCE_DIR (for add_subdirectory/FetchContent)
# or CMAKE_PREFIX_PATH (for find_package). It registers its executable as a
# CTest test, which this driver runs.

include("${CMAKE_CURRENT_LIST_DIR}/driver-common.cmake")

file(REMOVE_RECURSE "${CONSUMER_BINARY_DIR}")

set(_args ${GRADCOMP_DRIVER_CONFIGURE_ARGS}
  "-DGRADCOMP_SOURCE_DIR=${GRADCOMP_SOURCE_DIR}")
if(DEFINED PREFIX AND NOT "${PREFIX}" STREQUAL "")
  list(APPEND _args "-DCMAKE_PREFIX_PATH=${PREFIX}")
endif()
if(DEFINED CUDA_COMPILER AND NOT "${CUDA_COMPILER}" STREQUAL "")
  list(APPEND _args
    "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}"
    "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
endif()

gradcomp_driver_run("${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${CONSUMER_BINARY_DIR}" ${_args})
gradcomp_driver_run("${CMAKE_COMMAND}" --build "${CONSUMER_BINARY_DIR}" --config "${CONFIG}" --parallel 2)
gradcomp_driver_run("${CMAKE_CTEST_COMMAND}" --test-dir "${CONSUMER_BINARY_DIR}" -C "${CONFIG}"
                    --output-on-failure --no-tests=error)
