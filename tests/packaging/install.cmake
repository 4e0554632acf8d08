# Packaging route (a), part 1: configure the gradcomp source tree with
# everything but the library switched off, build, and install it into PREFIX.
# Then check that only headers and the CMake package files were installed.
#
#   cmake -DGRADCOMP_SOURCE_DIR=... -DBINARY_DIR=... -DPREFIX=... -DGENERATOR=...
#         -DCXX_COMPILER=... [-DCONFIG=...] [-DENABLE_CUDA=ON -DCUDA_COMPILER=...
#         -DCUDA_ARCHITECTURES=...] -P install.cmake

include("${CMAKE_CURRENT_LIST_DIR}/driver-common.cmake")

file(REMOVE_RECURSE "${BINARY_DIR}" "${PREFIX}")

set(_args ${GRADCOMP_DRIVER_CONFIGURE_ARGS}
  "-DCMAKE_INSTALL_PREFIX=${PREFIX}"
  -DGRADCOMP_BUILD_TESTS=OFF
  -DGRADCOMP_BUILD_EXAMPLES=OFF
  -DGRADCOMP_BUILD_BENCHMARKS=OFF
  -DGRADCOMP_BUILD_FUZZERS=OFF
  -DGRADCOMP_INSTALL=ON)
if(ENABLE_CUDA)
  list(APPEND _args -DGRADCOMP_ENABLE_CUDA=ON
    "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}"
    "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
else()
  list(APPEND _args -DGRADCOMP_ENABLE_CUDA=OFF)
endif()

gradcomp_driver_run("${CMAKE_COMMAND}" -S "${GRADCOMP_SOURCE_DIR}" -B "${BINARY_DIR}" ${_args})
gradcomp_driver_run("${CMAKE_COMMAND}" --build "${BINARY_DIR}" --config "${CONFIG}" --parallel 2)
gradcomp_driver_run("${CMAKE_COMMAND}" --install "${BINARY_DIR}" --config "${CONFIG}")

# --- What was installed? Headers, package files and the license only. ------
file(GLOB_RECURSE _installed RELATIVE "${PREFIX}" "${PREFIX}/*")
if(NOT _installed)
  message(FATAL_ERROR "packaging driver: nothing was installed into ${PREFIX}")
endif()
foreach(_f IN LISTS _installed)
  if(NOT _f MATCHES "^include/gradcomp/" AND NOT _f MATCHES "^share/cmake/gradcomp/" AND
     NOT _f STREQUAL "share/doc/gradcomp/LICENSE")
    message(FATAL_ERROR "packaging driver: unexpected installed file '${_f}' (only include/gradcomp/, "
                        "share/cmake/gradcomp/ and share/doc/gradcomp/LICENSE belong in the package)")
  endif()
endforeach()
foreach(_f
    include/gradcomp/gradcomp.hpp
    share/doc/gradcomp/LICENSE
    share/cmake/gradcomp/gradcomp-config.cmake
    share/cmake/gradcomp/gradcomp-config-version.cmake
    share/cmake/gradcomp/gradcomp-targets.cmake)
  if(NOT EXISTS "${PREFIX}/${_f}")
    message(FATAL_ERROR "packaging driver: missing installed file ${_f}")
  endif()
endforeach()
if(ENABLE_CUDA AND NOT EXISTS "${PREFIX}/share/cmake/gradcomp/gradcomp-cuda-targets.cmake")
  message(FATAL_ERROR "packaging driver: CUDA build but gradcomp-cuda-targets.cmake was not installed")
endif()

# Nothing project-internal may be exported.
file(GLOB _export_files "${PREFIX}/share/cmake/gradcomp/*.cmake")
foreach(_f IN LISTS _export_files)
  file(READ "${_f}" _text)
  foreach(_bad gradcomp_project_warnings -Werror -ffp-contract -Wpedantic)
    string(FIND "${_text}" "${_bad}" _pos)
    if(NOT _pos EQUAL -1)
      message(FATAL_ERROR "packaging driver: '${_bad}' leaked into installed ${_f}")
    endif()
  endforeach()
endforeach()

list(LENGTH _installed _n)
message(STATUS "packaging driver: installed ${_n} files into ${PREFIX}")
