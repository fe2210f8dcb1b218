#!/bin/sh
# fuse.sh BUILDDIR: small nonblocking allreduces of a group sharing NCCL calls (NCCLMPI_FUSE) on
# the stand-in CUDA driver and NCCL (test/unit/fuse_prog.c), at one rank, then at 2 and 3 ranks
# through the stand-in NCCL's shared-memory mode. One rank: with the stand-in's copy
# kernel (batches of regions) and without it (driver copies), every size, and with the default
# (which leaves one-rank communicators alone) and fusing off; the
# NCCLMPI_STATS line must count the fused operations and the calls they shared. Then
# test/gpu/gpu_fuse.c itself at 2-4 ranks (fuse_stand_in; with NCCLMPI_FUSE=all at 3-4 ranks, where
# a group's max and min reductions must reach NCCL apart), and at 3 ranks on one device with and
# without an NCCL_HOSTID per rank (the route must follow NCCL's rule for ranks sharing a GPU).
b=$1
d="$b/fuse_test"
prog="$b/test/unit/fuse_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in fuse "$b" "$d" "$prog"
fail=0
# (one rank: fused with NCCLMPI_FUSE=all only)
export NCCLMPI_FUSE=all
FAKE_CUDA_KERNELS=1 NCCLMPI_STATS=1 stand_in_run fuse_prog "$b" "$d" "copy kernel" 1 "$prog" || fail=1
line=$(grep "allreduces fused" "$d/err")
echo "fuse: ${line#\[ncclmpi\] }"
case "$line" in
*"allreduces fused: "[1-9]*" operations in "[1-9]*" NCCL calls"*) ;;
*) echo "fuse: FAIL: no 'allreduces fused' line with counts in the NCCLMPI_STATS summary"; fail=1 ;;
esac
stand_in_run fuse_prog "$b" "$d" "driver copies" 1 "$prog" || fail=1
NCCLMPI_FUSE_MAX=1M NCCLMPI_FUSE_MIN=2 stand_in_run fuse_prog "$b" "$d" "every size, pairs" 1 "$prog" || fail=1
NCCLMPI_FUSE=exact stand_in_run fuse_prog "$b" "$d" "NCCLMPI_FUSE=exact (none at one rank)" 1 "$prog" || fail=1
NCCLMPI_FUSE=off stand_in_run fuse_prog "$b" "$d" "NCCLMPI_FUSE=off" 1 "$prog" || fail=1
# several ranks, each with a device of its own and the stand-in NCCL's shared-memory mode: the
# ranks' plans must agree (the stand-in aborts, naming both calls, where the ranks' NCCL calls
# differ) while their layouts, alignments and memory kinds differ
unset NCCLMPI_FUSE
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 NCCLMPI_ONESHOT=0
for np in 2 3; do
  FAKE_CUDA_KERNELS=1 stand_in_run fuse_prog "$b" "$d" "default (every type at 2 ranks, integers at 3)" $np "$prog" || fail=1
done
NCCLMPI_FUSE=all stand_in_run fuse_prog "$b" "$d" "NCCLMPI_FUSE=all, driver copies" 3 "$prog" || fail=1
# the stand-in's streams running later, as a GPU's (FAKE_CUDA_ASYNC=1): packs, calls and unpacks
# in stream order, completions seen only after them
for np in 2 3; do
  FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1 stand_in_run fuse_prog "$b" "$d" "streams run later" $np "$prog" || fail=1
done
NCCLMPI_FUSE=off stand_in_run fuse_prog "$b" "$d" "NCCLMPI_FUSE=off" 2 "$prog" || fail=1
# the GPU test itself (test/gpu/gpu_fuse.c, explicit groups and back-to-back nonblocking calls of
# every type, op, layout and memory kind) on the stand-in runtime, streams running later, at 2-4
# ranks; byte-exact results against a float64 reference
if [ -x "$b/test/unit/fuse_stand_in" ]; then
  for np in 2 3 4; do
    STAND_IN_EXPECT="^gpu_fuse: $np ranks, .*: ok" FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1 \
      stand_in_run gpu_fuse "$b" "$d" "streams run later" $np "$b/test/unit/fuse_stand_in" || fail=1
  done
  # fusing every type at 3 and 4 ranks, where the stand-in NCCL (reporting an NCCL version that
  # mixes up max and min in one group) refuses a group holding both: ncclmpi's groups of mixed
  # ops go to NCCL as two, and each still fuses (gpu_fuse checks that some did)
  for np in 3 4; do
    STAND_IN_EXPECT="^gpu_fuse: $np ranks, .*: ok (rank 0: [1-9][0-9]* on NCCL, [1-9][0-9]* fused" NCCLMPI_FUSE=all \
      FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1 \
      stand_in_run gpu_fuse "$b" "$d" "NCCLMPI_FUSE=all, max and min apart" $np "$b/test/unit/fuse_stand_in" 6 || fail=1
  done
  # three ranks on one device: staged (NCCL refuses them), unless each has an NCCL_HOSTID of its
  # own (test/run_mpi.sh), where NCCL takes them as hosts of their own and so does ncclmpi
  for h in 0 1; do
    want="rank 0: 0 on NCCL"; [ $h = 1 ] && want="rank 0: [1-9][0-9]* on NCCL"
    STAND_IN_EXPECT="^gpu_fuse: 3 ranks, .*: ok ($want" FAKE_CUDA_DEVICE_PER_RANK=0 NM_TEST_HOSTID_PER_RANK=$h \
      FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1 \
      stand_in_run gpu_fuse "$b" "$d" "one device, NCCL_HOSTID per rank: $h" 3 "$b/test/unit/fuse_stand_in" || fail=1
  done
fi
exit $fail
