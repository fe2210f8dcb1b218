#!/bin/sh
# staged_pipe.sh BUILDDIR: the staged route's pipelined collectives on the stand-in CUDA driver
# (test/unit/staged_pipe_prog.c, NCCLMPI_FORCE_STAGED=1): a user op on a derived datatype, a
# datatype of more runs than a layout lists, and (2 and 3 ranks) host memory or copies failing on
# one rank only, which every rank must report with one error class.
b=$1
d="$b/staged_pipe_test"
prog="$b/test/unit/staged_pipe_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in staged_pipe "$b" "$d" "$prog"
export NCCLMPI_FORCE_STAGED=1
fail=0
for np in 1 2 3; do
  stand_in_run staged_pipe_prog "$b" "$d" "default settings" $np "$prog" || fail=1
done
# nothing cached in the pool: the capped rank must allocate its chunks
for np in 2 3; do
  NCCLMPI_STAGE_POOL=0 STAGED_PIPE_FAILURES=1 stand_in_run staged_pipe_prog "$b" "$d" "failures on the last rank" $np "$prog" || fail=1
done
exit $fail
