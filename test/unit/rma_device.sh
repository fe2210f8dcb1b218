#!/bin/sh
# rma_device.sh BUILDDIR: one-sided communication on windows in device memory
# (test/mpi/rma_device.c) on the stand-in CUDA driver, whose device memory other processes open
# through CUDA IPC (FAKE_CUDA_IPC=1), at 1, 2 and 3 ranks: every value MPI's semantics give,
# every call on a device window counted on the IPC route; and with a rank that never touches CUDA.
b=$1
d="$b/rma_device_test"
prog="$b/test/unit/rma_device_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in rma_device "$b" "$d" "$prog"
stand_in_need_ipc rma_device
fail=0
for np in 1 2 3; do
  stand_in_run rma_device "$b" "$d" "default settings" $np "$prog" || fail=1
done
# the last rank never touches CUDA itself: a host window, puts from host memory into a device one
for np in 2 3; do
  RMA_DEVICE_HOSTRANK=1 stand_in_run rma_device "$b" "$d" "a rank without CUDA" $np "$prog" || fail=1
done
exit $fail
