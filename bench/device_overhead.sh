#!/bin/bash
# device_overhead.sh BUILD_DIR [N1 N2]
#
# Host instructions (and ns) ncclmpi spends per device-buffer call on its NCCL route, on a machine
# without a GPU: bench/device_overhead runs on one rank against the stand-in CUDA driver and the
# one-rank stand-in NCCL (test/unit/fake_cuda.c, fake_nccl.c), under callgrind, counted inside
# dv_loop() only, at N1 and N2 calls:
#     per call = (Ir(N2) - Ir(N1)) / (N2 - N1)
# The stand-ins complete everything at once and cost a few instructions per entry point, so the
# count is the layer's own work: classification, route, op and task bookkeeping, the launch and
# the completion. NCCL's and the driver's real costs come on top (bench/engine_bench on a GPU).
#
# Every call of the burst is queued (NCCLMPI_COALESCE_WINDOW widened to 0.1 s, or as set).
# "of which stand-ins": the part spent inside the stand-in driver and NCCL (their own lookups);
# the layer's own count is the difference.
# Environment: LIB (the library to measure; default BUILD_DIR/.libs/libncclmpi.so),
#   KINDS (default "allreduce bcast iallreduce burst group enqueue"; "persistent" where the MPI has
#   MPI_Allreduce_init), KEEP=1 keeps the callgrind
#   files, ANNOTATE=1 prints the top functions of the N2 run, NO_TIME=1 skips the timing.
# Exit status: 0, or 2 on a setup error (valgrind missing, a call that did not take the NCCL route).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
[ $# -eq 1 ] || [ $# -eq 3 ] || { echo "usage: $0 BUILD_DIR [N1 N2]" >&2; exit 2; }
B=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no build directory $1" >&2; exit 2; }
N1=${2:-640}
N2=${3:-3200}
KINDS=${KINDS:-allreduce bcast iallreduce burst group enqueue}
make -C "$B" bench/device_overhead test/unit/libfakecuda.la test/unit/libfakenccl.la >/dev/null || exit 2
prog="$B/bench/device_overhead"
lib=${LIB:-$B/.libs/libncclmpi.so}  # LIB: another build of the library, to compare
VALGRIND=${VALGRIND:-$(command -v valgrind)}
[ -n "$VALGRIND" ] || { echo "$0: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/device_overhead.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "callgrind files kept in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
# the stand-ins under the names the application and ncclmpi load
ln -s "$B/test/unit/.libs/libfakecuda.so" "$tmp/libcuda.so.1"
ln -s "$B/test/unit/.libs/libfakenccl.so" "$tmp/libnccl.so.2"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl="self,vader" OMPI_MCA_pml="^ucx"
export OMPI_MCA_mtl="^ofi" OMPI_MCA_osc="^ucx" OMPI_MCA_opal_cuda_support=0
export NCCLMPI_NCCL_LIB="$tmp/libnccl.so.2" NCCL_NVLS_ENABLE=0
unset NCCLMPI_DISABLE

run() { # N KIND [--time]: output line on stdout
    # under valgrind calls are ~50x slower: the coalescing window is widened so that the burst's
    # calls stay back to back, as they are at full speed
    local w=${NCCLMPI_COALESCE_WINDOW:-20}
    case " $* " in *" burst "*) w=${NCCLMPI_COALESCE_WINDOW:-100000} ;; esac
    NCCLMPI_COALESCE_WINDOW=$w LD_LIBRARY_PATH="$tmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$lib" "$@"
}
ir() { # N KIND: instructions inside dv_loop
    local out="$tmp/cg.$2.$1"
    run "$VALGRIND" --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no --toggle-collect=dv_loop \
        "$prog" "$1" "$2" > "$tmp/out.$2.$1" 2> "$tmp/err.$2.$1" || { cat "$tmp/err.$2.$1" >&2; return 1; }
    grep -q " ok=1" "$tmp/out.$2.$1" || { echo "$0: $2 did not take the NCCL route: $(cat "$tmp/out.$2.$1")" >&2; return 1; }
    sed -n 's/^summary: *//p' "$out"
}
stand_ins() { # N KIND: instructions inside the stand-in driver and NCCL
    callgrind_annotate --inclusive=no --threshold=100 "$tmp/cg.$2.$1" 2>/dev/null > "$tmp/ann.$2.$1"
    awk '/libfake(cuda|nccl)\.so\]$/ { v=$1; gsub(",", "", v); t += v } END { print t + 0 }' "$tmp/ann.$2.$1"
}
printf "%-11s %14s %22s %12s\n" kind "instr/call" "of which stand-ins" "ns/call"
for k in $KINDS; do
    a=$(ir "$N1" "$k") || exit 2
    b=$(ir "$N2" "$k") || exit 2
    per=$(( (b - a) / (N2 - N1) ))
    fake=$(( ($(stand_ins "$N2" "$k") - $(stand_ins "$N1" "$k")) / (N2 - N1) ))
    ns=-
    [ "${NO_TIME:-0}" = 1 ] || ns=$(run "$prog" 200000 "$k" --time | sed -n 's/.*ns_per_call=//p')
    printf "%-11s %14d %22d %12s\n" "$k" "$per" "$fake" "$ns"
    if [ "${ANNOTATE:-0}" = 1 ]; then  # instructions per call by function (self), the N2 - N1 difference
        awk -v d=$((N2 - N1)) -v m="${ANNOTATE_MIN:-20}" 'function key(line) { sub(/^ *[0-9,]+ *\([ 0-9.%]+\) */, "", line); return line }
            /^ *[0-9,]+ / && !/=>/ { v=$1; gsub(",", "", v); if (FILENAME == ARGV[1]) a[key($0)] = v; else b[key($0)] = v }
            END { for (f in b) { x = (b[f] - a[f]) / d; if (x >= m) printf "%10.0f  %s\n", x, substr(f, 1, 150) } }' \
            "$tmp/ann.$k.$N1" "$tmp/ann.$k.$N2" | sort -rn | head -30
    fi
done
