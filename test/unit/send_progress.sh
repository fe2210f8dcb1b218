#!/bin/sh
# send_progress.sh BUILDDIR: a nonblocking device send's receive completes while the sender makes
# no MPI call (MPI-3.1 3.7.4; test/unit/send_progress_prog.c), two ranks on the stand-in driver:
# with point-to-point envelopes in device mode (with the stand-in's CUDA IPC where it works), 1 KiB
# (staged) and 64 KiB (an envelope, pulled by the receiver); in the host test mode and with
# envelopes off, 1 KiB only (there a larger device message is staged and goes by the real MPI's
# rendezvous, which needs the sender's progress for a host message without ncclmpi too: Open
# MPI's shared memory without single copy). The sends used to wait in the send queue until the
# sender's next MPI call (both envelope modes failed here).
b=$1
d="$b/send_progress_test"
prog="$b/test/unit/send_progress_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in send_progress "$b" "$d" "$prog"
fail=0
NCCLMPI_P2P_ENVELOPE=host stand_in_run send_progress_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=host" 2 "$prog" 1024 || fail=1
if stand_in_ipc; then
  FAKE_CUDA_IPC=1 NCCLMPI_P2P_ENVELOPE=device stand_in_run send_progress_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device" 2 "$prog" || fail=1
else
  echo "send_progress: device envelopes left out (the stand-in's CUDA IPC cannot work here)"
fi
NCCLMPI_P2P_ENVELOPE=off stand_in_run send_progress_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=off" 2 "$prog" 1024 || fail=1
exit $fail
