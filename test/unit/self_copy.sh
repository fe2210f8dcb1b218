#!/bin/sh
# self_copy.sh BUILDDIR: blocking device MPI_Sendrecv from each rank to itself on the stand-in CUDA
# driver (test/unit/self_copy_prog.c): one device copy where the receive can take nothing but the
# call's own send, the real order where an earlier message is pending; envelopes device and off,
# 1-3 ranks, with the send queue, and at MPI_THREAD_MULTIPLE (no copy there).
b=$1
d="$b/self_copy_test"
prog="$b/test/unit/self_copy_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in self_copy "$b" "$d" "$prog"
stand_in_need_ipc self_copy
export FAKE_CUDA_ASYNC=1 FAKE_CUDA_DEVICE_PER_RANK=1
fail=0
for env in device off; do
  for np in 1 2 3; do
    NCCLMPI_P2P_ENVELOPE=$env stand_in_run self_copy_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=$env" $np "$prog" || fail=1
  done
done
# nonblocking sends wait in the send queue until the next call: the call's flush sends them first
for np in 1 2; do
  NCCLMPI_P2P_SEND_QUEUE=1 NCCLMPI_P2P_ENVELOPE=device stand_in_run self_copy_prog "$b" "$d" "NCCLMPI_P2P_SEND_QUEUE=1" $np "$prog" || fail=1
done
SELF_COPY_THREADS=1 NCCLMPI_P2P_ENVELOPE=device stand_in_run self_copy_prog "$b" "$d" "MPI_THREAD_MULTIPLE" 2 "$prog" || fail=1
[ $fail = 0 ] && echo "self_copy: ok"
exit $fail
