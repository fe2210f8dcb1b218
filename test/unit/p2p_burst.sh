#!/bin/sh
# p2p_burst.sh BUILDDIR: bursts of nonblocking point-to-point calls on device buffers of the
# stand-in CUDA driver (test/unit/p2p_burst_prog.c) at 1 to 3 ranks, with envelopes off, in the
# host test mode and in device mode (also with the stand-in's CUDA IPC and kernels: batched payload
# copies): the send queue's small staged sends (copied at their calls or at the flush), derived
# types, a synchronous-mode send, a freed request, a large message.
b=$1
d="$b/p2p_burst_test"
prog="$b/test/unit/p2p_burst_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in p2p_burst "$b" "$d" "$prog"
fail=0
stand_in_envelopes p2p_burst_prog "$b" "$d" "$prog" || fail=1
# device mode with the stand-in's CUDA IPC and kernels: the receivers pull the payloads from the
# senders' pools, and a burst's copies go by copy-kernel launches (which the program checks ran)
for np in 2 3; do
  FAKE_CUDA_IPC=1 FAKE_CUDA_KERNELS=1 P2P_BURST_KERNELS=1 NCCLMPI_P2P_ENVELOPE=device \
    stand_in_run p2p_burst_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC and kernels" $np "$prog" || fail=1
done
# NCCLMPI_P2P_SEND_QUEUE=1: the sends wait in the send queue until the next call (by default
# they go at their calls: test/unit/send_progress.sh), their copies batched at the flush
for np in 2 3; do
  NCCLMPI_P2P_SEND_QUEUE=1 NCCLMPI_P2P_ENVELOPE=host stand_in_run p2p_burst_prog "$b" "$d" "NCCLMPI_P2P_SEND_QUEUE=1, host envelopes" $np "$prog" || fail=1
  FAKE_CUDA_IPC=1 FAKE_CUDA_KERNELS=1 P2P_BURST_KERNELS=1 NCCLMPI_P2P_ENVELOPE=device NCCLMPI_P2P_SEND_QUEUE=1 \
    stand_in_run p2p_burst_prog "$b" "$d" "NCCLMPI_P2P_SEND_QUEUE=1, device envelopes, CUDA IPC and kernels" $np "$prog" || fail=1
done
exit $fail
