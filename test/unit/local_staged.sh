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
  stand_in_run local_staged "$b" "$d" "default settings" $np "$prog" || fail=1
done
exit $fail
