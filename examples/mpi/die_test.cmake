# The failure drill's check (cmake -P): runs the MPI command line in COMMAND (a ;-list) and
# passes when it ends with a non-zero status within BOUND seconds and its output matches every
# regular expression in EXPECT (a ;-list): the dying rank's own line and the launcher's report.
# A hang (the surviving ranks waiting in a collective for ever) fails at BOUND.
#
#   cmake -DCOMMAND="mpirun;-np;4;gradcomp_mpi;--die-at-step;5;--die-rank;2" -DBOUND=30
#         -DEXPECT="rank 2 dies at step 5" -P die_test.cmake
cmake_minimum_required(VERSION 3.20)

foreach(var COMMAND BOUND EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "die_test.cmake: -D${var}=... is required")
  endif()
endforeach()

string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${BOUND})
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
set(all "${out}\n${err}")
message("${all}")
message("-- exit status: ${rc}; ${seconds} s (bound ${BOUND} s)")

if(NOT rc MATCHES "^-?[0-9]+$")
  message(FATAL_ERROR "the job did not end within ${BOUND} s (${rc}): a rank's death left the others waiting")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited with status 0 although a rank died")
endif()
foreach(want IN LISTS EXPECT)
  if(NOT all MATCHES "${want}")
    message(FATAL_ERROR "the output does not say '${want}'")
  endif()
endforeach()
message("-- the job ended with status ${rc} in ${seconds} s, saying why")
