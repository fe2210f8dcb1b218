#!/bin/sh
# mpix_stream.sh BUILDDIR: MPICH's stream extension (test/mpi/mpix_stream.c) on the stand-in CUDA
# driver and NCCL: at 1 rank the communicator has the stand-in's NCCL communicator (enqueued
# allreduces launched on the stream), at 2 and 3 ranks the staged path (enqueued calls wait for
# the stream, then run as their blocking forms); the same with NCCLMPI_DISABLE=1 (every call the
# real MPI's, after the stream); two threads at once under MPI_THREAD_MULTIPLE; then at 2 and 3
# ranks on the NCCL route, the stand-in's streams running later (FAKE_CUDA_ASYNC=1), with and
# without the threads.
b=$1
d="$b/mpix_stream_test"
prog="$b/test/unit/mpix_stream_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mpix_stream "$b" "$d" "$prog"
fail=0
for np in 1 2 3; do
  stand_in_run mpix_stream "$b" "$d" "default settings" $np "$prog" || fail=1
done
NCCLMPI_DISABLE=1 stand_in_run mpix_stream "$b" "$d" "NCCLMPI_DISABLE=1" 2 "$prog" || fail=1
# two threads enqueueing on communicators of their own (MPI_THREAD_MULTIPLE)
for np in 1 2; do
  MPIX_STREAM_THREADS=1 stand_in_run mpix_stream "$b" "$d" "two threads" $np "$prog" || fail=1
done
# a device per rank and the stand-in NCCL's several ranks, its streams running later as a GPU's
# (FAKE_CUDA_ASYNC=1): enqueued allreduces on the NCCL route at 2 and 3 ranks, host messages
# crossing them, calls in flight when the communicator is freed
for np in 2 3; do
  FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0 \
    stand_in_run mpix_stream "$b" "$d" "the NCCL route, streams run later" $np "$prog" || fail=1
done
# the same under MPI_THREAD_MULTIPLE (NCCLMPI_RENDEZVOUS takes turns there): an enqueued call
# never waits for the peers on the host, and the two threads' communicators run at once
for np in 2 3; do
  FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0 MPIX_STREAM_THREADS=1 NCCLMPI_TIMEOUT=20 \
    stand_in_run mpix_stream "$b" "$d" "the NCCL route, two threads" $np "$prog" || fail=1
done
exit $fail
