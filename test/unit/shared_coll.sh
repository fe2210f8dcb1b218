#!/bin/sh
# shared_coll.sh BUILDDIR: the blocking collectives of ranks that share a GPU through ncclmpi's
# device window (test/mpi/shared_coll.c) on the stand-in CUDA driver, whose memory other processes
# open through its CUDA IPC (FAKE_CUDA_IPC=1) and whose copy and reduction kernels run in the
# caller (FAKE_CUDA_KERNELS=1), at 2, 3, 4 and 12 ranks (the window takes up to 32), every size on
# the window in 64 KiB chunks; then communicators made and freed in a loop (NCCLMPI_COMM_CACHE);
# then, with a device per rank, the same on the NCCL route (the stand-in NCCL's several ranks).
b=$1
d="$b/shared_coll_test"
prog="$b/test/unit/shared_coll_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in shared_coll "$b" "$d" "$prog"
stand_in_need_ipc shared_coll
export FAKE_CUDA_KERNELS=1 NCCLMPI_SHARED_MIN=0 NCCLMPI_SHARED_SLOT=64K
fail=0
for np in 2 3 4 12; do
  stand_in_run shared_coll "$b" "$d" "every size on the window" $np "$prog" || fail=1
done
# communicators made and freed in a loop: later ones of the same processes in the same order take
# over the freed ones' windows (the log says so), also where one rank keeps fewer than the others
# (r: rank 0 one, the others two; they offer different ones); none with the cache off. At one rank
# the communicators are NCCL's (the stand-in's one-rank NCCL), taken over alike.
export NCCLMPI_LOG=DEBUG NCCLMPI_LOG_SUBSYS=INIT NCCLMPI_STATS=1
for c in 2:1 2:3 2:4 1:3 r:3 0:4; do
  cache=${c%:*} np=${c#*:}
  by_rank=; set=$cache; [ "$cache" = r ] && by_rank=1 set=2
  SHARED_COLL_CACHE_BY_RANK=$by_rank SHARED_COLL_ONLY=churn NCCLMPI_COMM_CACHE=$set stand_in_run shared_coll "$b" "$d" "communicator churn, cache $cache" $np "$prog" || { fail=1; continue; }
  reused=$(grep -cE "reuses the (shared-GPU window|NCCL communicator)" "$d/err")
  made=$(grep -cE "shared-GPU window of|NCCL communicator agreed and made" "$d/err")
  echo "shared_coll: cache $cache, $np ranks: $made windows or NCCL communicators made, $reused taken over (all ranks)"
  # NCCLMPI_STATS's summary counts the same
  grep -Eq "device communicators \(NCCL, or shared-GPU windows\): $made( \[[0-9-]+\])? made, $reused( \[[0-9-]+\])? taken over" "$d/err" ||
    { echo "shared_coll: FAIL: NCCLMPI_STATS does not say $made made, $reused taken over:"; grep "device communicators" "$d/err"; fail=1; }
  if [ "$cache" = 0 ] && [ "$reused" != 0 ]; then echo "shared_coll: FAIL: one taken over with NCCLMPI_COMM_CACHE=0"; fail=1; fi
  if [ "$cache" = 2 ] && [ "$reused" -lt $((np * 8)) ]; then echo "shared_coll: FAIL: fewer taken over than expected"; fail=1; fi
done
# a device of its own per rank and the stand-in NCCL's several-rank mode: the same cases on the NCCL
# route (its bodies: NCCL's collectives, grouped sends and receives, packing, per-rank types)
# against the real MPI, at 2 to 4 ranks, communicators taken over
unset NCCLMPI_LOG NCCLMPI_LOG_SUBSYS NCCLMPI_COMM_CACHE NCCLMPI_SHARED_MIN NCCLMPI_SHARED_SLOT
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 NCCLMPI_ONESHOT=0 SHARED_COLL_ROUTE=nccl
for np in 2 3 4; do
  stand_in_run shared_coll "$b" "$d" "one device per rank, the NCCL route" $np "$prog" || fail=1
done
FAKE_CUDA_ASYNC=1 stand_in_run shared_coll "$b" "$d" "the NCCL route, streams run later" 3 "$prog" || fail=1
exit $fail
