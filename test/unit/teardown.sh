#!/bin/sh
# teardown.sh BUILDDIR: MPI_Finalize destroys the NCCL sides of live communicators in one order on
# every rank (test/unit/teardown_prog.c: rank 0 came to know its communicators in another order
# than the others), at 2 and 3 ranks, each with a device of its own on the stand-in driver and
# the stand-in NCCL. Each rank's destroys (NCCLMPI_LOG=DEBUG) are compared with rank 0's. They
# followed each rank's own order of first sight before. And no communicator may be freed at
# MPI_Finalize with an agreement round in flight (a lone MPI_Iallreduce's, which nobody waits
# for): MPI_Finalize completes them first (before, they were left to the real MPI_Finalize).
b=$1
d="$b/teardown_test"
prog="$b/test/unit/teardown_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in teardown "$b" "$d" "$prog"
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 NCCLMPI_ONESHOT=0
fail=0
for np in 2 3; do
  NCCLMPI_LOG=DEBUG NCCLMPI_LOG_SUBSYS=INIT,COLL stand_in_run teardown_prog "$b" "$d" "destroys at MPI_Finalize" $np "$prog" || { fail=1; continue; }
  order() { grep "^\[ncclmpi r$1[] ].*MPI_Finalize destroys the NCCL side" "$d/err" | sed 's/.*NCCL side \([0-9a-f]*\).*/\1/' | tr '\n' ' '; }
  o0=$(order 0)
  [ "$(echo $o0 | wc -w)" -ge 2 ] || { echo "teardown: FAIL: $np ranks: rank 0 destroyed fewer than 2 sides: '$o0'"; fail=1; continue; }
  r=1 same=1
  while [ $r -lt $np ]; do
    o=$(order $r)
    [ "$o" = "$o0" ] || { echo "teardown: FAIL: $np ranks: rank $r destroyed '$o', rank 0 '$o0'"; fail=1; same=0; }
    r=$((r + 1))
  done
  if grep "with [0-9]* agreement rounds in flight" "$d/err"; then
    echo "teardown: FAIL: $np ranks: a communicator was torn down or freed at MPI_Finalize with its rounds in flight"
    fail=1
    same=0
  fi
  [ $same = 1 ] && echo "teardown: $np ranks: every rank destroyed its sides in the order $o0, no round left in flight"
done
exit $fail
