#!/bin/sh
# nvtx.sh BUILDDIR: NCCLMPI_NVTX=1 puts an NVTX range around each device-buffer call ncclmpi routes
# and each NCCL group it launches. bench/device_overhead runs one rank on the NCCL route against
# the stand-in driver and NCCL (test/unit/fake_cuda.c, fake_nccl.c), with an NVTX injection library
# that records the ranges (test/unit/nvtx_record.c) as Nsight Systems would receive them.
# NCCLMPI_NVTX=2 marks the stages of each call instead (src/core/nvtx.h), which bench/stage_profile
# sums (device_overhead --stages).
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
# the stages: each call classified, routed, launched and waited for, nested under routed
rm -f "$d/ranges"
NCCLMPI_NVTX=2 run 5 allreduce >"$d/out" 2>"$d/err" || fail "the run with NCCLMPI_NVTX=2 failed"
grep -q "ok=1" "$d/out" || fail "NVTX=2: the calls did not take the NCCL route: $(cat "$d/out")"
! grep -q '^push MPI_\|^push ncclmpi:' "$d/ranges" || fail "NVTX=2: call ranges (those are NVTX=1's)"
for st in classify routed launch mark wait; do
    c=$(grep -c "^push nm:$st\$" "$d/ranges")
    [ "$c" -ge 5 ] || fail "NVTX=2: $c nm:$st ranges for at least 5 calls"
done
pushes=$(grep -c '^push ' "$d/ranges"); pops=$(grep -c '^pop$' "$d/ranges")
[ "$pushes" = "$pops" ] || fail "NVTX=2: $pushes pushes and $pops pops"
awk '/^push nm:routed$/ { if (d) bad = 1; d++; next } /^push nm:classify$/ { if (d) bad = 1; d++; next }
     /^push nm:(launch|wait)$/ { if (d != 1) bad = 1; d++; next } /^push / { d++; next } /^pop$/ { d-- }
     END { exit bad || d != 0 }' "$d/ranges" || fail "NVTX=2: a stage range nested where it should not be"
# bench/stage_profile's sums, read by device_overhead --stages
prof="$b/bench/.libs/libstageprofile.so"
if [ -f "$prof" ]; then
    NCCLMPI_NVTX=2 NVTX_INJECTION64_PATH="$prof" run 64 burst --stages >"$d/out" 2>"$d/err" || fail "--stages failed"
    grep -q '^stage=nm:classify per_call=1.000 ' "$d/out" || fail "--stages: no classify stage per call: $(cat "$d/out")"
    grep -q '^stage=nm:request per_call=' "$d/out" || fail "--stages: no request stage: $(cat "$d/out")"
    grep -q '^probe_ns=[1-9]' "$d/out" || fail "--stages: the profiler's cost was not measured: $(cat "$d/out")"
fi
rm -f "$d/ranges"
run 5 allreduce >"$d/out" 2>"$d/err" || fail "the run without NCCLMPI_NVTX failed"
[ ! -s "$d/ranges" ] || fail "ranges without NCCLMPI_NVTX=1"
echo "nvtx: $calls call ranges, $groups group ranges, nested and balanced; the stages under NVTX=2"
