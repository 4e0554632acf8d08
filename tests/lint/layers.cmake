# The layers: the backend-neutral folders (core/, engine/, sharded/, tagc/, summable/, sketch/,
# the policies, transformer/, localsteps/, transform/) include no header of a backend (cpu/ or
# cuda/) at all. The CPU public API headers at the top (compressor.hpp, gather.hpp, sharded.hpp,
# tagc.hpp, localsteps.hpp) run a flow on the CPU
# and reach the backend only through its executors (allowed below); every other cpu/ header is
# an internal of the backend. The CUDA backend's own headers are .cuh.
# Run as: cmake -DROOT=<source dir> -P layers.cmake
cmake_policy(SET CMP0057 NEW)
set(_executors executor.hpp tagc.hpp sharded.hpp localsteps.hpp)
file(GLOB_RECURSE _files "${ROOT}/include/gradcomp/*.hpp")
set(_found "")
foreach(_file IN LISTS _files)
  if(_file MATCHES "/include/gradcomp/(cpu|cuda)/")
    continue()
  endif()
  set(_top FALSE)
  if(_file MATCHES "/include/gradcomp/[a-z_]+\\.hpp$")
    set(_top TRUE)
  endif()
  file(STRINGS "${_file}" _lines REGEX "#include [\"<](\\.\\./)*(gradcomp/)?(cpu|cuda)/")
  foreach(_line IN LISTS _lines)
    string(REGEX MATCH "(cpu|cuda)/([a-z_]+\\.[a-z]+)" _m "${_line}")
    if(NOT _top OR NOT CMAKE_MATCH_1 STREQUAL "cpu" OR NOT CMAKE_MATCH_2 IN_LIST _executors)
      string(APPEND _found "  ${_file}: ${_line}\n")
    endif()
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "backend includes outside the backends (neutral folders include none; the CPU public API headers only the CPU executors):\n${_found}")
endif()
