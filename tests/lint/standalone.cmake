# The repository stands alone: no file in it refers to a file outside it (a path that climbs
# out of the checkout, or a design brief that is not part of the project). Run as:
# cmake -DROOT=<source dir> -P standalone.cmake
file(GLOB_RECURSE _files LIST_DIRECTORIES false
  "${ROOT}/*.md" "${ROOT}/*.txt" "${ROOT}/*.cmake" "${ROOT}/*.json" "${ROOT}/*.hpp" "${ROOT}/*.cpp"
  "${ROOT}/*.cuh" "${ROOT}/*.cu" "${ROOT}/*.py" "${ROOT}/*.toml" "${ROOT}/*.sh" "${ROOT}/.ci/*" "${ROOT}/benchmarks/report")
set(_found "")
foreach(_file IN LISTS _files)
  if(_file MATCHES "^${ROOT}/(build|\\.venv|\\.git)/" OR _file MATCHES "/tests/lint/standalone\\.cmake$")
    continue()
  endif()
  file(STRINGS "${_file}" _lines REGEX "DESIGN\\.md|\\.\\./shared")
  foreach(_line IN LISTS _lines)
    string(APPEND _found "  ${_file}: ${_line}\n")
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "references to files outside the repository:\n${_found}")
endif()
