#!/bin/sh
# trace.sh BUILDDIR: NCCLMPI_LOG=TRACE logs every intercepted call, also in a process without a
# CUDA driver: a 2-rank run of test/mpi/hostonly must trace its buffer calls (with their route)
# and its lifecycle, communicator, completion and barrier calls, and the run must still pass.
b=$1
run="$b/test/run_mpi.sh"
prog="$b/test/mpi/hostonly"
d="$b/trace_test"
rm -rf "$d"; mkdir -p "$d"
for v in $(env | sed -n 's/^\(NCCLMPI_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
fail() { echo "trace: FAIL: $*"; tail -20 "$d/err"; exit 1; }
[ -x "$prog" ] || { echo "trace: $prog not built"; exit 77; }

NCCLMPI_LOG=TRACE "$run" 2 preload "$prog" >"$d/out" 2>"$d/err" || fail "the traced run failed"
for r in 0 1; do
  # buffer calls: the route; the others: the call
  for f in Allreduce Iallreduce Allgather Bcast Irecv Isend Sendrecv; do
    grep -q "^\[ncclmpi r$r\] TRACE .*MPI_$f .*-> host" "$d/err" || fail "rank $r: no trace of MPI_$f with its route"
  done
  for f in Init Comm_dup Wait Waitall Finalize; do
    grep -Eq "^\[ncclmpi (r$r|pid [0-9]+)\] TRACE .*MPI_$f( |$)" "$d/err" || fail "rank $r: no trace of MPI_$f"
  done
done
# without TRACE: not a line
"$run" 2 preload "$prog" >"$d/out" 2>"$d/err" || fail "the plain run failed"
grep -q "TRACE" "$d/err" && fail "trace lines without NCCLMPI_LOG=TRACE"
echo "trace: every intercepted call traced"
