#!/bin/sh
# expect_status.sh STATUS COMMAND [ARGS...]
# Runs COMMAND; passes when it exits with STATUS and never printed "SURVIVED". For jobs that
# must abort: under MPI_ERRORS_ARE_FATAL Open MPI aborts with the error code as exit status
# (its report of the error is not always relayed by mpirun, so the status is what we check).
want=${1:?usage: expect_status.sh STATUS COMMAND [ARGS...]}
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
echo "expect_status: exit status $rc, expected $want"
case "$out" in *SURVIVED*) echo "expect_status: the program survived" >&2; exit 1 ;; esac
[ "$rc" -eq "$want" ]
