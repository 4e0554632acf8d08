"""Conan 2 recipe for gradcomp, a header-only C++20 library.

From a checkout: ``conan create . -s compiler.cppstd=20`` puts gradcomp/<version> in the local
cache; a consumer requires it and uses CMakeDeps and CMakeToolchain (README.md, "Use it in your
project"; tests/packaging/conan.sh runs both).

The package holds the headers and the license. Its CMake targets come from CMakeDeps:
``gradcomp::gradcomp`` and ``gradcomp::cuda`` (the CUDA backend: the same headers, and, in a
project that enables CUDA, the CUDA runtime and C++20 for CUDA, added by the build module
share/cmake/gradcomp/gradcomp-conan.cmake). No option: nothing in the package depends on CUDA.
"""

import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rm, rmdir, save

required_conan_version = ">=2.0"


class GradcompConan(ConanFile):
    name = "gradcomp"
    description = ("Header-only C++20 library that compresses gradients for distributed training: quantizers, "
                   "sparsifiers, error feedback, self-describing checksummed frames")
    license = "Apache-2.0"
    topics = ("gradient-compression", "distributed-training", "header-only", "cuda")
    package_type = "header-library"
    # The compiler is needed to configure the CMake project that installs the headers, and to
    # check C++20; the package itself is one for every configuration (package_id).
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "CMakeLists.txt", "LICENSE", "cmake/*", "include/*"
    no_copy_source = True

    def set_version(self):
        # One version number: CMake's project(VERSION).
        text = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        self.version = re.search(r"project\(gradcomp\s+VERSION\s+(\d+\.\d+\.\d+)", text).group(1)

    def layout(self):
        cmake_layout(self)

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)

    def generate(self):
        tc = CMakeToolchain(self)
        for option in ("TESTS", "EXAMPLES", "BENCHMARKS", "FUZZERS"):
            tc.cache_variables[f"GRADCOMP_BUILD_{option}"] = False
        tc.cache_variables["GRADCOMP_INSTALL"] = True
        tc.cache_variables["GRADCOMP_ENABLE_CUDA"] = False
        tc.generate()

    def package(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.install()
        # CMakeDeps writes the consumer's package configuration: drop the project's own, keep
        # its components file as the build module's body.
        cmake_dir = os.path.join(self.package_folder, "share", "cmake", "gradcomp")
        for name in ("gradcomp-config.cmake", "gradcomp-config-version.cmake", "gradcomp-targets*.cmake"):
            rm(self, name, cmake_dir)
        save(self, os.path.join(cmake_dir, "gradcomp-conan.cmake"),
             "# Included by the package configuration CMakeDeps writes, after gradcomp::gradcomp and\n"
             "# gradcomp::cuda are declared: CUDA's usage requirements for gradcomp::cuda and the\n"
             "# components' check (gradcomp-components.cmake).\n"
             'set(_gradcomp_cuda_targets "")\n'
             'include("${CMAKE_CURRENT_LIST_DIR}/gradcomp-components.cmake")\n')
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        rmdir(self, os.path.join(self.package_folder, "share", "doc"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "gradcomp")
        # As the CMake package: while the major version is 0, find_package(gradcomp 0.1) takes 0.1.x only.
        self.cpp_info.set_property("cmake_config_version_compat", "SameMinorVersion")
        # CMakeDeps also declares a target for the whole package, which links every component:
        # named apart, so that gradcomp::gradcomp is the core alone.
        self.cpp_info.set_property("cmake_target_name", "gradcomp::gradcomp_all")
        self.cpp_info.set_property("cmake_build_modules", [os.path.join("share", "cmake", "gradcomp", "gradcomp-conan.cmake")])
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "gradcomp::gradcomp")
        core.bindirs = []
        core.libdirs = []

        cuda = self.cpp_info.components["cuda"]
        cuda.set_property("cmake_target_name", "gradcomp::cuda")
        cuda.requires = ["core"]
        cuda.bindirs = []
        cuda.libdirs = []
