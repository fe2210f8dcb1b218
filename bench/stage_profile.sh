#!/bin/bash
# stage_profile.sh BUILD_DIR [stand-ins|gpu]
#
# Host time per device-buffer call by stage, on one rank: bench/device_overhead runs each kind
#   - with NCCLMPI_NVTX=0 and --time: the true ns per call (no ranges, nothing measured inside);
#   - with NCCLMPI_NVTX=2 and bench/stage_profile's NVTX injection library, --stages: the self
#     time of each stage ncclmpi marks (src/core/nvtx.h), less the profiler's own measured cost.
# "other" is the true total less the stages: the interposition before classification, the
# benchmark's loop, and what the stages' correction misses (each range costs the profiler ~50-70
# ns, taken out by calibration, so a stage is good to about +-10 ns). Medians of REPS runs.
#
#   stand-ins  (default) the stand-in CUDA driver and one-rank NCCL of test/unit, which complete
#              everything at once: the layer's own work, no driver or NCCL cost
#   gpu        the real driver and NCCL of the machine (the layer's work plus theirs)
#
# Stages (per call; a burst's flush and wait are shared by its 64 operations):
#   classify  state, the buffers' memory kinds, the route        queue    the operation made, queued
#   request   its task and MPI request                           order    ordering after the application's streams
#   launch    the NCCL group (or one-shot kernels) issued        mark     the launch's completion event or flag
#   flush     a wait's (or blocking call's) flush of the queue   wait     the loop until completion
#   routed    the routed call's own remainder
# Environment: KINDS (default "allreduce iallreduce burst group enqueue"), N (calls per run,
#   default 19200), REPS (default 5), DV_COUNT (floats per operation, default 2), LIB (the library).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 BUILD_DIR [stand-ins|gpu]" >&2; exit 2; }
B=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no build directory $1" >&2; exit 2; }
mode=${2:-stand-ins}
case "$mode" in stand-ins|gpu) ;; *) echo "$0: mode is stand-ins or gpu, not $mode" >&2; exit 2 ;; esac
KINDS=${KINDS:-allreduce iallreduce burst group enqueue}
N=${N:-19200}
REPS=${REPS:-5}
targets="bench/device_overhead bench/libstageprofile.la"
[ "$mode" = gpu ] || targets="$targets test/unit/libfakecuda.la test/unit/libfakenccl.la"
make -C "$B" $targets >/dev/null || exit 2
prog="$B/bench/device_overhead"
lib=${LIB:-$B/.libs/libncclmpi.so}
prof="$B/bench/.libs/libstageprofile.so"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stage_profile.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ "$mode" = stand-ins ]; then
    ln -s "$B/test/unit/.libs/libfakecuda.so" "$tmp/libcuda.so.1"
    ln -s "$B/test/unit/.libs/libfakenccl.so" "$tmp/libnccl.so.2"
    export NCCLMPI_NCCL_LIB="$tmp/libnccl.so.2" LD_LIBRARY_PATH="$tmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl="self,vader" OMPI_MCA_pml="^ucx"
export OMPI_MCA_mtl="^ofi" OMPI_MCA_osc="^ucx" OMPI_MCA_opal_cuda_support=0
unset NCCLMPI_DISABLE NCCLMPI_NVTX

stages="classify routed queue request order launch mark flush wait"
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf "%s, one rank, %s floats per operation, medians of %s runs of %s calls; ns per call\n" "$mode" "${DV_COUNT:-2}" "$REPS" "$N"
printf "%-11s %8s" kind total
for s in $stages; do printf " %8s" "$s"; done
printf " %8s %6s\n" other probe
for k in $KINDS; do
    : >"$tmp/total" && : >"$tmp/stages"
    for r in $(seq "$REPS"); do
        LD_PRELOAD="$lib" "$prog" "$N" "$k" --time >"$tmp/out" 2>"$tmp/err" || { echo "$0: $k failed:" >&2; cat "$tmp/err" >&2; exit 2; }
        grep -q " ok=1" "$tmp/out" || { echo "$0: $k did not take the NCCL route: $(cat "$tmp/out")" >&2; exit 2; }
        sed -n 's/.*ns_per_call=//p' "$tmp/out" >>"$tmp/total"
        NCCLMPI_NVTX=2 NVTX_INJECTION64_PATH="$prof" LD_PRELOAD="$lib" "$prog" "$N" "$k" --stages >"$tmp/out" 2>"$tmp/err" ||
            { echo "$0: $k --stages failed:" >&2; cat "$tmp/err" >&2; exit 2; }
        sed -n 's/^stage=nm:\([a-z]*\) per_call=[0-9.]* self_ns=\([-0-9.]*\)$/\1 \2/p; s/^probe_ns=\([0-9.]*\).*/probe \1/p' "$tmp/out" >>"$tmp/stages"
    done
    total=$(median <"$tmp/total")
    printf "%-11s %8.0f" "$k" "$total"
    sum=0
    for s in $stages; do
        v=$(awk -v s="$s" '$1 == s { print $2 }' "$tmp/stages" | median)
        if [ "$v" = - ]; then printf " %8s" -; else printf " %8.0f" "$v"; sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }'); fi
    done
    printf " %8.0f %6.0f\n" "$(awk -v t="$total" -v s="$sum" 'BEGIN { print t - s }')" "$(awk '$1 == "probe" { print $2 }' "$tmp/stages" | median)"
done
