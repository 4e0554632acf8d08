# Writes a consumer project from README.md: main.cpp is the quickstart (the ```cpp block after
# "<!-- quickstart"), and every block after "<!-- consume ROUTE: FILE -->" of the routes asked
# for becomes OUT/FILE, verbatim.
#
#   cmake -DREADME=<README.md> -DOUT=<dir> "-DROUTES=find_package;vcpkg" -P readme-consumer.cmake
#
# (Also include()d by readme.cmake, with the same variables set.)

cmake_minimum_required(VERSION 3.25)

foreach(_var README OUT ROUTES)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "readme-consumer: -D${_var}=... is required")
  endif()
endforeach()

file(READ "${README}" _readme)
file(MAKE_DIRECTORY "${OUT}")

if(NOT _readme MATCHES "<!-- quickstart[^>]*-->\n```cpp\n([^`]*)```")
  message(FATAL_ERROR "readme-consumer: ${README} has no ```cpp block after <!-- quickstart -->")
endif()
file(WRITE "${OUT}/main.cpp" "${CMAKE_MATCH_1}")

foreach(_route IN LISTS ROUTES)
  set(_rest "${_readme}")
  set(_count 0)
  while(_rest MATCHES "<!-- consume ${_route}: ([^ >]+) -->\n```[a-z]*\n([^`]*)```(.*)")
    set(_file "${CMAKE_MATCH_1}")
    set(_text "${CMAKE_MATCH_2}")
    set(_rest "${CMAKE_MATCH_3}")
    file(WRITE "${OUT}/${_file}" "${_text}")
    message(STATUS "readme-consumer: ${_route}: ${OUT}/${_file}")
    math(EXPR _count "${_count} + 1")
  endwhile()
  if(_count EQUAL 0)
    message(FATAL_ERROR "readme-consumer: ${README} has no block after <!-- consume ${_route}: FILE -->")
  endif()
endforeach()
