# The project speaks of the project: docs, CI and headers describe what is, not who worked on
# it or in which round. Fails if docs/, .ci/, include/ or README.md speak of sessions or
# sittings. Run as: cmake -DROOT=<source dir> -P wording.cmake
file(GLOB_RECURSE _files "${ROOT}/docs/*" "${ROOT}/.ci/*" "${ROOT}/include/*")
list(APPEND _files "${ROOT}/README.md")
set(_found "")
foreach(_file IN LISTS _files)
  file(STRINGS "${_file}" _lines REGEX "[Ss][Ee][Ss][Ss][Ii][Oo][Nn]|[Ss][Ii][Tt][Tt][Ii][Nn][Gg]")
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "(^|[^A-Za-z_])([Ss]essions?|[Ss]ittings?)([^A-Za-z_]|$)")
      string(APPEND _found "  ${_file}: ${_line}\n")
    endif()
  endforeach()
endforeach()
if(_found)
  message(FATAL_ERROR "history wording (sessions, sittings) in the project's text:\n${_found}")
endif()
