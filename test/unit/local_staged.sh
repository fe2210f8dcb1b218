#!/bin/sh
# local_staged.sh BUILDDIR: the local calls ncclmpi stages on device buffers (packing,
# MPI_Reduce_local, MPI-IO: test/mpi/local_staged.c) on the stand-in CUDA driver's memory, at 1, 2
# and 3 ranks: the bytes the real MPI gives on host copies, every call on the staged route.
b=$1
d="$b/local_staged_test"
prog="$b/test/unit/local_staged_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in local_staged "$b" "$d" "$prog"
fail=0
for np in 1 2 3; do
  TMPDIR="$d" timeout 120 "$b/test/run_mpi.sh" $np preload "$prog" >"$d/out" 2>"$d/err"
  rc=$?
  [ $rc = 77 ] && exit 77
  if [ $rc != 0 ] || ! grep -q "local_staged: ok" "$d/out"; then
    echo "local_staged: FAIL at $np ranks (exit $rc$([ $rc = 124 ] && echo ': timed out, a hang'))"
    head -20 "$d/out"
    tail -20 "$d/err"
    fail=1
  else
    echo "local_staged: $np ranks: ok"
  fi
done
exit $fail
