#!/bin/sh
# p2p_persist.sh BUILDDIR: persistent point-to-point requests on device buffers of the stand-in
# CUDA driver (test/unit/p2p_persist_prog.c) at 1 to 3 ranks: with envelopes off (the real MPI's
# persistent requests on host shadows), in the host test mode and in device mode (restarted
# nonblocking calls), and in device mode with the stand-in's CUDA IPC (large payloads pulled from
# the senders' pools), and with two threads under MPI_THREAD_MULTIPLE.
b=$1
d="$b/p2p_persist_test"
prog="$b/test/unit/p2p_persist_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in p2p_persist "$b" "$d" "$prog"
fail=0
# where envelopes travel (host or device mode, 2 and more ranks) the requests must be ncclmpi's
restarted() {  # MODE NP
  [ "$1" = off ] || [ "$2" -lt 2 ] || grep -q "restarted nonblocking calls" "$d/out" && return 0
  echo "p2p_persist: FAIL: $1, $2 ranks: the persistent requests were not restarted nonblocking calls"
  return 1
}
stand_in_envelopes p2p_persist_prog "$b" "$d" "$prog" restarted || fail=1
# MPI_THREAD_MULTIPLE, two threads restarting their own requests at once
for np in 1 2; do
  P2P_PERSIST_THREADS=2 NCCLMPI_P2P_ENVELOPE=device \
    stand_in_run p2p_persist_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, two threads" $np "$prog" || fail=1
done
if stand_in_ipc; then
  for np in 2 3; do
    FAKE_CUDA_IPC=1 NCCLMPI_P2P_ENVELOPE=device \
      stand_in_run p2p_persist_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC" $np "$prog" || fail=1
    restarted "device, CUDA IPC" $np || fail=1
  done
  FAKE_CUDA_IPC=1 P2P_PERSIST_THREADS=2 NCCLMPI_P2P_ENVELOPE=device \
    stand_in_run p2p_persist_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC, two threads" 3 "$prog" || fail=1
else
  echo "p2p_persist: the CUDA IPC case skipped (a process cannot open another's descriptors here)"
fi
exit $fail
