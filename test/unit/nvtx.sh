#!/bin/sh
# nvtx.sh BUILDDIR: NCCLMPI_NVTX=1 puts an NVTX range around each device-buffer call ncclmpi routes
# and each NCCL group it launches. bench/device_overhead runs one rank on the NCCL route against
# the stand-in driver and NCCL (test/unit/fake_cuda.c, fake_nccl.c), with an NVTX injection library
# that records the ranges (test/unit/nvtx_record.c) as Nsight Systems would receive them.
b=$1
d="$b/nvtx_test"
fail() { echo "nvtx: FAIL: $*"; cat "$d/err" "$d/ranges" 2>/dev/null | tail -20; exit 1; }
prog="$b/bench/device_overhead"
rec="$b/test/unit/.libs/libnvtxrecord.so"
. "$(dirname "$0")/stand_in.sh"
stand_in nvtx "$b" "$d" "$prog" "$rec"
export NVTX_INJECTION64_PATH="$rec" NVTX_RECORD_FILE="$d/ranges"
run() { LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$b/.libs/libncclmpi.so" "$prog" "$@"; }

NCCLMPI_NVTX=1 run 5 allreduce >"$d/out" 2>"$d/err" || fail "the run with NCCLMPI_NVTX=1 failed"
grep -q "ok=1" "$d/out" || fail "the calls did not take the NCCL route: $(cat "$d/out")"
calls=$(grep -c '^push MPI_Allreduce nccl$' "$d/ranges")
groups=$(grep -c '^push ncclmpi: NCCL group of 1 on comm[0-9]*$' "$d/ranges")
pushes=$(grep -c '^push ' "$d/ranges"); pops=$(grep -c '^pop$' "$d/ranges")
# 5 measured calls and the warm-up ones; each call holds its group's range
[ "$calls" -ge 5 ] || fail "$calls MPI_Allreduce ranges (expected at least 5)"
[ "$groups" -ge "$calls" ] || fail "$groups NCCL group ranges for $calls calls"
[ "$pushes" = "$pops" ] || fail "$pushes pushes and $pops pops"
awk '/^push MPI_/ { d++; next } /^push ncclmpi: NCCL group/ { if (d == 0) bad = 1; d++; next } /^pop$/ { d-- }
     END { exit bad || d != 0 }' "$d/ranges" || fail "an NCCL group range outside a call range"
rm -f "$d/ranges"
run 5 allreduce >"$d/out" 2>"$d/err" || fail "the run without NCCLMPI_NVTX failed"
[ ! -s "$d/ranges" ] || fail "ranges without NCCLMPI_NVTX=1"
echo "nvtx: $calls call ranges, $groups group ranges, nested and balanced"
