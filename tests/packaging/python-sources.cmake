# The Python package's sdist holds python/ only, so python/ carries what the sdist must hold
# of the rest of the repository: python/LICENSE is a copy of LICENSE and must stay equal to
# it, and python/include is a link to include/ (the sdist stores the headers themselves).
#
#   cmake -DROOT=<source dir> -P python-sources.cmake

cmake_minimum_required(VERSION 3.25)

set(_errors "")
if(NOT EXISTS "${ROOT}/python/LICENSE")
  string(APPEND _errors "  python/LICENSE is missing (a copy of LICENSE)\n")
else()
  file(SHA256 "${ROOT}/LICENSE" _license)
  file(SHA256 "${ROOT}/python/LICENSE" _python_license)
  if(NOT _license STREQUAL _python_license)
    string(APPEND _errors "  python/LICENSE differs from LICENSE (copy LICENSE over it)\n")
  endif()
endif()

file(REAL_PATH "${ROOT}/include" _include)
file(REAL_PATH "${ROOT}/python/include" _python_include)
if(NOT IS_SYMLINK "${ROOT}/python/include" OR NOT _python_include STREQUAL _include)
  string(APPEND _errors "  python/include is not a link to include/ (git checks links out as files where "
                        "core.symlinks is false; the link is `ln -s ../include python/include`)\n")
endif()

if(_errors)
  message(FATAL_ERROR "python/ lacks what its sdist needs:\n${_errors}")
endif()
message(STATUS "python/: LICENSE equal to the repository's, include/ a link to the repository's")
