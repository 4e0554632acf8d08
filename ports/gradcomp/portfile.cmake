# gradcomp is header-only: the build configures the CMake project with everything but the
# library switched off and installs the headers, the CMake package files and the license.
set(VCPKG_BUILD_TYPE release)
set(VCPKG_FIXUP_ELF_RPATH OFF)  # no binaries: nothing to patch (and no patchelf to fetch)

# The source. This port lives in ports/gradcomp/ of a gradcomp checkout and, used from there
# (vcpkg install gradcomp --overlay-ports=<checkout>/ports, or VCPKG_OVERLAY_PORTS in manifest
# mode), it builds that checkout. vcpkg's binary cache does not hash a local source tree:
# set VCPKG_BINARY_SOURCES=clear (or remove the installed package) after changing it.
#
# Copied into a registry (microsoft/vcpkg's ports/ or a registry of your own), the same file
# takes the release tarball from GitHub instead: set REPO to the repository gradcomp is
# published from and SHA512 to the tarball's hash (vcpkg prints it when SHA512 is 0).
if(EXISTS "${CURRENT_PORT_DIR}/../../include/gradcomp/gradcomp.hpp"
   AND EXISTS "${CURRENT_PORT_DIR}/../../CMakeLists.txt")
  get_filename_component(SOURCE_PATH "${CURRENT_PORT_DIR}/../.." ABSOLUTE)
else()
  vcpkg_from_github(
    OUT_SOURCE_PATH SOURCE_PATH
    REPO OWNER/gradcomp
    REF "v${VERSION}"
    SHA512 0
    HEAD_REF main)
endif()

# The cuda feature installs gradcomp-cuda-targets.cmake, which defines gradcomp::cuda for
# consumers that enable CUDA. The headers are the same either way; without the feature the
# port never looks for nvcc, so its result does not depend on the build machine.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda GRADCOMP_ENABLE_CUDA)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DGRADCOMP_BUILD_TESTS=OFF
    -DGRADCOMP_BUILD_EXAMPLES=OFF
    -DGRADCOMP_BUILD_BENCHMARKS=OFF
    -DGRADCOMP_BUILD_FUZZERS=OFF
    -DGRADCOMP_INSTALL=ON)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/gradcomp)

if("cuda" IN_LIST FEATURES AND NOT EXISTS "${CURRENT_PACKAGES_DIR}/share/gradcomp/gradcomp-cuda-targets.cmake")
  message(FATAL_ERROR "gradcomp[cuda]: no CUDA compiler was found while configuring gradcomp. "
                      "Install the CUDA toolkit (nvcc) or point CUDACXX at it.")
endif()

# The license goes to share/gradcomp/copyright, where vcpkg keeps it.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/doc")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
