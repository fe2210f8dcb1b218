#!/bin/sh
# mpix_stream.sh BUILDDIR: MPICH's stream extension (test/mpi/mpix_stream.c) on the stand-in CUDA
# driver and NCCL: at 1 rank the communicator has the stand-in's NCCL communicator (enqueued
# allreduces launched on the stream), at 2 and 3 ranks the staged path (enqueued calls wait for
# the stream, then run as their blocking forms); the same with NCCLMPI_DISABLE=1 (every call the
# real MPI's, after the stream); two threads at once under MPI_THREAD_MULTIPLE.
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
exit $fail
