# Test-case names hold no ';': CTest reads it as a list separator, and doctest_discover_tests
# would register two tests whose filters match no test case (and pass without running it).
# Run as: cmake -DROOT=<source dir> -P test_names.cmake
file(GLOB_RECURSE _files "${ROOT}/tests/*.cpp" "${ROOT}/tests/*.cu")
set(_found "")
foreach(_file IN LISTS _files)
  file(STRINGS "${_file}" _lines REGEX "TEST_CASE\\(\"[^\"]*;")
  foreach(_line IN LISTS _lines)
    string(APPEND _found "  ${_file}: ${_line}\n")
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "test-case names with ';':\n${_found}")
endif()
