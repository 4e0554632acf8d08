# Every header under include/gradcomp compiles on its own (it includes what it uses), with
# the project's warnings as errors. Run as:
# cmake -DROOT=<source dir> -DCXX=<C++ compiler> -DWORK=<scratch dir> -P headers.cmake
file(GLOB_RECURSE _headers RELATIVE "${ROOT}/include" "${ROOT}/include/gradcomp/*.hpp")
list(SORT _headers)
file(MAKE_DIRECTORY "${WORK}")
set(_failed "")
foreach(_h IN LISTS _headers)
  string(MAKE_C_IDENTIFIER "${_h}" _name)
  set(_tu "${WORK}/${_name}.cpp")
  file(WRITE "${_tu}" "#include <${_h}>\n")
  execute_process(
    COMMAND "${CXX}" -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -I "${ROOT}/include" "${_tu}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    string(APPEND _failed "--- ${_h}\n${_out}${_err}\n")
  endif()
endforeach()
list(LENGTH _headers _n)
if(_failed)
  message(FATAL_ERROR "headers that do not compile on their own:\n${_failed}")
endif()
message(STATUS "${_n} headers compile on their own")
