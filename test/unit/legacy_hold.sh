#!/bin/sh
# legacy_hold.sh BUILDDIR: device point-to-point on the stand-in CUDA driver while the application
# holds the legacy stream with work that waits for its host (test/unit/legacy_hold_prog.c): with
# device envelopes over the stand-in's CUDA IPC, and with envelopes off (every device message
# staged), at 2 and 3 ranks, MPI_Waitall must not wait for that work. A receive whose pull is made on the legacy stream and waited for there fails every
# round (tried). Not reached here: a receive's first read of its peer's pool head (the copy
# events' handles), which waited for the legacy stream through cuMemcpy until 2026-12-07; the
# stand-in has no copy events between processes when its streams run later (FAKE_CUDA_ASYNC).
# FAKE_CUDA_HOLD_TRAP=1 lists (stderr, with stacks) the allocations, frees, registrations and IPC
# opens made while the legacy stream is held: the real driver may synchronise in such a call.
b=$1
d="$b/legacy_hold_test"
prog="$b/test/unit/legacy_hold_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in legacy_hold "$b" "$d" "$prog"
stand_in_need_ipc legacy_hold
export FAKE_CUDA_ASYNC=1 FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 NCCLMPI_ONESHOT=0  # (round 6: the stand-in NCCL)
fail=0
for env in device off; do
  for np in 2 3; do
    NCCLMPI_P2P_ENVELOPE=$env stand_in_run legacy_hold_prog "$b" "$d" "NCCLMPI_P2P_ENVELOPE=$env, CUDA IPC, the legacy stream held" $np "$prog" || fail=1
  done
done
# at MPI_THREAD_MULTIPLE (nothing waits in the send queue; receives are ncclmpi's requests)
for np in 2 3; do
  LEGACY_HOLD_THREADS=1 NCCLMPI_P2P_ENVELOPE=device stand_in_run legacy_hold_prog "$b" "$d" \
    "NCCLMPI_P2P_ENVELOPE=device, MPI_THREAD_MULTIPLE, the legacy stream held" $np "$prog" || fail=1
done
exit $fail
