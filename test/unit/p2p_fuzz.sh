#!/bin/sh
# p2p_fuzz.sh BUILDDIR: test/gpu/gpu_p2p.c, the seeded random point-to-point matching test (random
# peers, tags, wildcards, probes, truncation, cancels, device/pinned/malloc buffers), on the
# stand-in driver and runtime (test/unit/p2p_stand_in): each rank with a device of its own, CUDA
# IPC between the ranks (so envelopes can pull payloads from the sender's device), streams running
# later, at 2-4 ranks, for each NCCLMPI_P2P_ENVELOPE mode and several seeds (P2P_FUZZ_SEEDS).
# Each run's plan derives from its seed, and gpu_p2p checks statuses, bytes, guard bytes and the
# non-overtaking order against it.
b=$1
d="$b/p2p_fuzz_test"
prog="$b/test/unit/p2p_stand_in"
. "$(dirname "$0")/stand_in.sh"
stand_in p2p_fuzz "$b" "$d" "$prog"
stand_in_need_ipc p2p_fuzz
export FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1
fail=0 runs=0
for env in off host device; do
  for np in 2 3 4; do
    for seed in ${P2P_FUZZ_SEEDS:-3 11}; do
      # (device: every device message of 4 KiB and more as an envelope)
      STAND_IN_EXPECT="^gpu_p2p: $np ranks, .* 0 failure(s)" NCCLMPI_P2P_ENVELOPE=$env NCCLMPI_P2P_ENVELOPE_MIN=4096 \
        stand_in_run p2p_fuzz "$b" "$d" "NCCLMPI_P2P_ENVELOPE=$env, seed $seed" $np "$prog" --seed $seed --rounds 8 --max 1048576 ||
        fail=1
      runs=$((runs + 1))
    done
  done
done
[ $fail = 0 ] && echo "p2p_fuzz: ok ($runs runs)"
exit $fail
