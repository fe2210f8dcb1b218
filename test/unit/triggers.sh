#!/bin/sh
# triggers.sh BUILDDIR: bursts of nonblocking device allreduces on the NCCL route reached through
# different calls on different ranks (test/unit/triggers_prog.c), at 2 and 3 ranks, each with a
# device of its own on the stand-in driver and the stand-in NCCL's several-rank mode (which aborts
# where the ranks' NCCL calls differ); with fusing (integers: at every size) and without, and with
# the stand-in's streams running later, as a GPU's (FAKE_CUDA_ASYNC=1), where the program adds a
# host message crossing device calls and two communicators in opposite orders.
b=$1
d="$b/triggers_test"
prog="$b/test/unit/triggers_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in triggers "$b" "$d" "$prog"
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_KERNELS=1 NCCLMPI_ONESHOT=0
fail=0
for np in 2 3; do
  stand_in_run triggers_prog "$b" "$d" "fused" $np "$prog" || fail=1
  NCCLMPI_FUSE=off stand_in_run triggers_prog "$b" "$d" "NCCLMPI_FUSE=off" $np "$prog" || fail=1
  # the stand-in's streams running later, as a GPU's: the host returns from every launch at once
  FAKE_CUDA_ASYNC=1 stand_in_run triggers_prog "$b" "$d" "streams run later" $np "$prog" || fail=1
done
exit $fail
