# One version number: CMake's project(VERSION) (passed as VERSION) against every other copy,
# the macros in include/gradcomp/core/version.hpp (gradcomp::version is built from them),
# python/pyproject.toml, gradcomp.__version__ in python/gradcomp/__init__.py and the vcpkg
# port's manifest. (conanfile.py reads project(VERSION) itself; the README's snippets name
# the version too, and the packaging tests that run them fail where they differ.)
#
#   cmake -DROOT=<source dir> -DVERSION=<project version> -P versions.cmake

cmake_minimum_required(VERSION 3.25)

if(NOT VERSION MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+$")
  message(FATAL_ERROR "versions.cmake: -DVERSION=MAJOR.MINOR.PATCH is required (got '${VERSION}')")
endif()
set(_errors "")

# <file> <regex with one group> -> the group, compared with VERSION.
function(_gradcomp_expect file regex)
  file(READ "${ROOT}/${file}" _text)
  if(NOT _text MATCHES "${regex}")
    set(_errors "${_errors}  ${file}: no version found (${regex})\n" PARENT_SCOPE)
  elseif(NOT CMAKE_MATCH_1 STREQUAL VERSION)
    set(_errors "${_errors}  ${file}: ${CMAKE_MATCH_1}\n" PARENT_SCOPE)
  endif()
endfunction()

file(READ "${ROOT}/include/gradcomp/core/version.hpp" _header)
set(_macros "")
foreach(_part MAJOR MINOR PATCH)
  if(_header MATCHES "#define GRADCOMP_VERSION_${_part} ([0-9]+)")
    list(APPEND _macros "${CMAKE_MATCH_1}")
  else()
    list(APPEND _macros "?")
  endif()
endforeach()
list(JOIN _macros "." _macros)
if(NOT _macros STREQUAL VERSION)
  string(APPEND _errors "  include/gradcomp/core/version.hpp: ${_macros}\n")
endif()

_gradcomp_expect(python/pyproject.toml "\nversion = \"([^\"]*)\"")
_gradcomp_expect(python/gradcomp/__init__.py "\n__version__ = \"([^\"]*)\"")
_gradcomp_expect(ports/gradcomp/vcpkg.json "\"version\": \"([^\"]*)\"")

if(_errors)
  message(FATAL_ERROR "versions differ from CMake's project(VERSION ${VERSION}):\n${_errors}")
endif()
message(STATUS "versions: ${VERSION} everywhere")
