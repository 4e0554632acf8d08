# The README's FetchContent and find_package snippets, run: readme-consumer.cmake writes the
# consumer (the snippet's CMakeLists.txt and the quickstart), which is configured, built and
# run; the quickstart must print "sum[42] = 1".
#
#   ROUTE=find_package: against an installed gradcomp (-DPREFIX=<install prefix>).
#   ROUTE=fetchcontent: the snippet's URL is replaced by a git repository made from this
#     source tree (its files as they are, committed once and tagged as the snippet's
#     GIT_TAG, which must be v<VERSION>); nothing else in the snippet changes.
#
#   cmake -DGRADCOMP_SOURCE_DIR=... -DGENERATOR=... -DCXX_COMPILER=... -DWORK=<dir>
#         -DROUTE=find_package|fetchcontent [-DPREFIX=...] [-DVERSION=... -DGIT=<git>] -P readme.cmake

cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/driver-common.cmake")

file(REMOVE_RECURSE "${WORK}")
set(README "${GRADCOMP_SOURCE_DIR}/README.md")
set(OUT "${WORK}/app")
set(ROUTES "${ROUTE}")
include("${CMAKE_CURRENT_LIST_DIR}/readme-consumer.cmake")

set(_args ${GRADCOMP_DRIVER_CONFIGURE_ARGS})
if(ROUTE STREQUAL "find_package")
  list(APPEND _args "-DCMAKE_PREFIX_PATH=${PREFIX}")
elseif(ROUTE STREQUAL "fetchcontent")
  file(READ "${OUT}/CMakeLists.txt" _lists)
  if(NOT _lists MATCHES "GIT_TAG[ \t\r\n]+([^ \t\r\n)]+)")
    message(FATAL_ERROR "readme: the FetchContent snippet has no GIT_TAG")
  endif()
  set(_tag "${CMAKE_MATCH_1}")
  if(NOT _tag STREQUAL "v${VERSION}")
    message(FATAL_ERROR "readme: the FetchContent snippet asks for ${_tag}; this is version ${VERSION} (tag v${VERSION})")
  endif()
  # A repository holding the source tree's files (tracked and untracked, .gitignore
  # respected) in one commit: the tree under test, not the last commit.
  if(DEFINED GIT AND NOT "${GIT}" STREQUAL "")
    set(_git "${GIT}")
  else()
    find_program(_git git REQUIRED)
  endif()
  set(_repo "${WORK}/gradcomp.git")
  set(_git_cmd "${_git}" -c user.name=gradcomp-tests -c user.email=tests@localhost -c commit.gpgsign=false
               -c core.hooksPath=/dev/null --git-dir=${_repo} --work-tree=${GRADCOMP_SOURCE_DIR})
  gradcomp_driver_run("${_git}" init --quiet --bare "${_repo}")
  gradcomp_driver_run(${_git_cmd} add --all)
  gradcomp_driver_run(${_git_cmd} commit --quiet -m "gradcomp ${VERSION}")
  gradcomp_driver_run(${_git_cmd} tag "${_tag}")
  string(REGEX REPLACE "GIT_REPOSITORY[ \t\r\n]+[^ \t\r\n)]+" "GIT_REPOSITORY file://${_repo}" _lists "${_lists}")
  file(WRITE "${OUT}/CMakeLists.txt" "${_lists}")
else()
  message(FATAL_ERROR "readme: ROUTE must be find_package or fetchcontent (got '${ROUTE}')")
endif()

gradcomp_driver_run("${CMAKE_COMMAND}" -S "${OUT}" -B "${WORK}/build" ${_args})
gradcomp_driver_run("${CMAKE_COMMAND}" --build "${WORK}/build" --config "${CONFIG}" --parallel 2)
foreach(_app "${WORK}/build/app" "${WORK}/build/${CONFIG}/app" "${WORK}/build/app.exe" "${WORK}/build/${CONFIG}/app.exe")
  if(EXISTS "${_app}")
    execute_process(COMMAND "${_app}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
    message(STATUS "readme: ${_app}: ${_out}")
    if(NOT _rc EQUAL 0 OR NOT _out MATCHES "sum\\[42\\] = 1")
      message(FATAL_ERROR "readme: the quickstart failed (${_rc})")
    endif()
    return()
  endif()
endforeach()
message(FATAL_ERROR "readme: the snippet built no app in ${WORK}/build")
