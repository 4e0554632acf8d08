"""One version number: gradcomp.__version__, the installed distribution's metadata and, in a
checkout, CMake's project(VERSION), python/pyproject.toml and include/gradcomp/core/version.hpp."""

import importlib.metadata
import os
import re

import pytest

import gradcomp

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def test_version_is_the_distributions():
    assert re.fullmatch(r"\d+\.\d+\.\d+", gradcomp.__version__), gradcomp.__version__
    assert gradcomp.__version__ == importlib.metadata.version("gradcomp")


def test_version_is_the_repositorys():
    if not os.path.isfile(os.path.join(ROOT, "include", "gradcomp", "core", "version.hpp")):
        pytest.skip("not run from a gradcomp checkout")
    cmake = re.search(r"project\(gradcomp\s+VERSION\s+(\d+\.\d+\.\d+)", _read("CMakeLists.txt")).group(1)
    pyproject = re.search(r'^version\s*=\s*"([^"]+)"', _read("python", "pyproject.toml"), re.M).group(1)
    header = _read("include", "gradcomp", "core", "version.hpp")
    macros = ".".join(re.search(rf"#define GRADCOMP_VERSION_{part} (\d+)", header).group(1)
                      for part in ("MAJOR", "MINOR", "PATCH"))
    assert gradcomp.__version__ == cmake == pyproject == macros
