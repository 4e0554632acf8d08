# The layers: engine/, tagc/ and the other backend-neutral headers reach the CPU backend only
# through its executors (cpu/executor.hpp, cpu/tagc.hpp, cpu/sharded.hpp) or its public option headers
# (cpu/dispatch.hpp, cpu/stores.hpp); every other cpu/ header is an internal of the backend.
# Run as: cmake -DROOT=<source dir> -P layers.cmake
cmake_policy(SET CMP0057 NEW)
set(_allowed executor.hpp tagc.hpp sharded.hpp dispatch.hpp stores.hpp)
file(GLOB_RECURSE _files "${ROOT}/include/gradcomp/*.hpp")
set(_found "")
foreach(_file IN LISTS _files)
  if(_file MATCHES "/include/gradcomp/cpu/")
    continue()
  endif()
  file(STRINGS "${_file}" _lines REGEX "#include \"(\\.\\./)*cpu/")
  foreach(_line IN LISTS _lines)
    string(REGEX MATCH "cpu/([a-z_]+\\.hpp)" _m "${_line}")
    if(NOT CMAKE_MATCH_1 IN_LIST _allowed)
      string(APPEND _found "  ${_file}: ${_line}\n")
    endif()
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "includes of cpu/ internals outside the CPU backend:\n${_found}")
endif()
