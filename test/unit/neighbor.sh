#!/bin/sh
# neighbor.sh BUILDDIR: neighbourhood collectives with device buffers of the stand-in CUDA driver
# on some ranks and host buffers on others (test/unit/neighbor_prog.c) at 1 to 3 ranks: with
# envelopes off and in the host test mode (the real MPI's calls, device buffers staged), in device
# mode (every rank's calls as point-to-point), and in device mode with the stand-in's CUDA IPC
# (blocks of 1 KiB and more as envelopes, released with fewer messages than envelopes), and with
# two threads under MPI_THREAD_MULTIPLE.
b=$1
d="$b/neighbor_test"
prog="$b/test/unit/neighbor_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in neighbor "$b" "$d" "$prog"
fail=0
# device mode (2 ranks and more: envelopes are on) must run them as point-to-point, the others not
mode_is() {  # WHAT NP HOW
  grep -q "($2 ranks, $3," "$d/out" && return 0
  echo "neighbor: FAIL: $1, $2 ranks: not run $3"
  return 1
}
expected_mode() {  # MODE NP
  if [ "$1" = device ] && [ "$2" -gt 1 ]; then mode_is "$1" "$2" "as point-to-point"
  elif [ "$1" != device ]; then mode_is "$1" "$2" "the real MPI's"; fi
}
stand_in_envelopes neighbor_prog "$b" "$d" "$prog" expected_mode || fail=1
# MPI_THREAD_MULTIPLE, two threads running every call at once on communicators of their own
for np in 2 3; do
  NEIGHBOR_THREADS=1 NCCLMPI_P2P_ENVELOPE=device stand_in_run neighbor_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, two threads" $np "$prog" &&
    mode_is "device, two threads" $np "as point-to-point" || fail=1
done
if stand_in_ipc; then
  for np in 2 3; do
    FAKE_CUDA_IPC=1 NCCLMPI_P2P_ENVELOPE=device NCCLMPI_P2P_ENVELOPE_MIN=1K NEIGHBOR_SCALE=64 NCCLMPI_LOG=INFO NCCLMPI_LOG_SUBSYS=CALL \
      stand_in_run neighbor_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC, blocks of 1-5 KiB as envelopes" $np "$prog" || { fail=1; continue; }
    grep -q " [1-9][0-9]* envelopes," "$d/out" || { echo "neighbor: FAIL: $np ranks: no block went as an envelope"; fail=1; }
    # the payloads a receiver's progress pass released go back as one message per sender: fewer
    # release messages than envelopes (MPI_Finalize's INFO line of each rank)
    sed -n 's/.* \([0-9][0-9]*\) point-to-point message(s) went as envelopes; \([0-9][0-9]*\) release message(s) sent.*/\1 \2/p' "$d/err" |
      awk -v np=$np '{e += $1; r += $2; n++} END {if (n != np || r >= e) {print "neighbor: FAIL: " np " ranks: " e " envelopes released with " r " messages (" n " ranks said)"; exit 1}
                   print "neighbor: " np " ranks: " e " envelopes released with " r " messages"}' || fail=1
    mode_is "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC" $np "as point-to-point" || fail=1
  done
  NEIGHBOR_THREADS=1 FAKE_CUDA_IPC=1 NCCLMPI_P2P_ENVELOPE=device NCCLMPI_P2P_ENVELOPE_MIN=1K NEIGHBOR_SCALE=64 \
    stand_in_run neighbor_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=device, CUDA IPC, envelopes, two threads" 3 "$prog" || fail=1
else
  echo "neighbor: the CUDA IPC case skipped (a process cannot open another's descriptors here)"
fi
exit $fail
