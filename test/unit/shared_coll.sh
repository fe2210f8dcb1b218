#!/bin/sh
# shared_coll.sh BUILDDIR: the blocking collectives of ranks that share a GPU through ncclmpi's
# device window (test/mpi/shared_coll.c) on the stand-in CUDA driver, whose memory other processes
# open through its CUDA IPC (FAKE_CUDA_IPC=1) and whose copy and reduction kernels run in the
# caller (FAKE_CUDA_KERNELS=1), at 2, 3, 4 and 12 ranks (the window takes up to 32), every size on
# the window in 64 KiB chunks.
b=$1
d="$b/shared_coll_test"
prog="$b/test/unit/shared_coll_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in shared_coll "$b" "$d" "$prog"
stand_in_ipc || { echo "shared_coll: skipped (a process cannot open another's descriptors here)"; exit 77; }
export FAKE_CUDA_IPC=1 FAKE_CUDA_KERNELS=1 NCCLMPI_SHARED_MIN=0 NCCLMPI_SHARED_SLOT=64K
fail=0
for np in 2 3 4 12; do
  stand_in_run shared_coll "$b" "$d" "every size on the window" $np "$prog" || fail=1
done
exit $fail
