#!/bin/bash
# host_overhead.sh BUILD_DIR [N1 N2]
#
# What libncclmpi adds to a host-buffer MPI call (the requirement: <= LIMIT instructions/call).
#
# 1. Instructions: bench/host_overhead runs under callgrind, once per kind and per N in {N1, N2},
#    without and with LD_PRELOAD=BUILD_DIR/.libs/libncclmpi.so. Callgrind collects only inside
#    hb_loop() (--collect-atstart=no --toggle-collect=hb_loop), the function that makes the N calls,
#    so MPI_Init/Finalize (whose instruction counts vary from run to run) stay out of the totals.
#      added/call = ((Ir_with(N2) - Ir_with(N1)) - (Ir_without(N2) - Ir_without(N1))) / (N2 - N1)
#    The N difference cancels one-time costs (lazy binding, first-call setup) in both runs.
# 2. Time: TIME_N calls of each kind timed with clock_gettime inside the program, TIME_RUNS runs
#    without and with the preload (alternating), median ns/call of each.
#
# Environment: KINDS (default "allreduce send test iprobe wait"; also sendrecv, and irecv: an
#   MPI_Irecv + MPI_Send + MPI_Wait to the rank itself, per iteration; sendrecv1k and irecv1k: the
#   same with 1 KiB, where a receive with envelopes on has room for an envelope), LIMIT (150), TIME_N (1000000),
#   TIME_RUNS (5), NO_TIME=1 skips the timing, KEEP=1 keeps the callgrind files.
# Exit status: 0 when every kind adds <= LIMIT instructions per call, 1 when one adds more,
#   2 on a usage or setup error (missing valgrind, program not built, preload not effective).
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac

usage() { echo "usage: $0 BUILD_DIR [N1 N2]" >&2; exit 2; }
[ $# -eq 1 ] || [ $# -eq 3 ] || usage
B=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no build directory $1" >&2; exit 2; }
N1=${2:-2000}
N2=${3:-12000}
[ "$N2" -gt "$N1" ] 2>/dev/null || { echo "$0: need N2 > N1 (got $N1 $N2)" >&2; exit 2; }
KINDS=${KINDS:-allreduce send test iprobe wait}
LIMIT=${LIMIT:-150}
TIME_N=${TIME_N:-1000000}
TIME_RUNS=${TIME_RUNS:-5}

prog="$B/bench/host_overhead"
lib="$B/.libs/libncclmpi.so"
if [ ! -x "$prog" ]; then
    echo "building $prog" >&2
    make -C "$B" bench/host_overhead >&2 || exit 2
fi
[ -f "$lib" ] || { echo "$0: $lib not found: build the library first (make -C $B)" >&2; exit 2; }
VALGRIND=${VALGRIND:-$(command -v valgrind)}
[ -n "$VALGRIND" ] || { echo "$0: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 2; }

# a singleton Open MPI run in a container: no fabric probing, no CMA (as test/run_mpi.sh)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl="^openib" OMPI_MCA_pml="^ucx"
export OMPI_MCA_mtl="^ofi" OMPI_MCA_osc="^ucx"
unset LD_PRELOAD NCCLMPI_DISABLE

tmp=$(mktemp -d "${TMPDIR:-/tmp}/host_overhead.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then echo "callgrind files kept in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

die() { echo "$0: $*" >&2; exit 2; }

# run PRELOAD(0|1) KIND N [ARGS]: run the program, check that ncclmpi was (not) in the process and,
# when it was, that it counted every call of the kind; prints the program's output.
check_output() { # MODE KIND N OUTPUT_FILE
    local line
    line=$(grep "^kind=$2 " "$4") || die "no result line for $2 in $4: $(cat "$4")"
    case "$1" in
    0) echo "$line" | grep -q " ncclmpi=0 " || die "plain run of $2 has ncclmpi loaded: $line" ;;
    1) echo "$line" | grep -q " ncclmpi=1 counted=$3\( \|$\)" ||
        die "preload run of $2: ncclmpi not loaded or did not count all $3 calls: $line" ;;
    esac
}

# ir MODE KIND N: callgrind's instruction count of hb_loop(KIND, N)
ir() {
    local out="$tmp/cg.$1.$2.$3" pre=""
    [ "$1" = 1 ] && pre="$lib"
    LD_PRELOAD="$pre" "$VALGRIND" --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
        --toggle-collect=hb_loop "$prog" "$3" "$2" >"$out.log" 2>&1 ||
        die "valgrind run failed ($2 N=$3 preload=$1), log: $(tail -20 "$out.log")"
    check_output "$1" "$2" "$3" "$out.log"
    sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out" | head -1
}

echo "ncclmpi host-call overhead: $prog"
echo "library: $lib"
echo "callgrind Ir counted in hb_loop only; N1=$N1 N2=$N2; limit $LIMIT instructions/call"
echo
printf '%-10s %14s %14s %14s  %s\n' kind "MPI Ir/call" "+ncclmpi" "added Ir/call" "<= $LIMIT"
worst=0
status=0
for k in $KINDS; do
    o1=$(ir 0 "$k" "$N1") || exit 2
    o2=$(ir 0 "$k" "$N2") || exit 2
    w1=$(ir 1 "$k" "$N1") || exit 2
    w2=$(ir 1 "$k" "$N2") || exit 2
    [ -n "$o1" ] && [ -n "$o2" ] && [ -n "$w1" ] && [ -n "$w2" ] || die "no callgrind summary for $k"
    row=$(awk -v o1="$o1" -v o2="$o2" -v w1="$w1" -v w2="$w2" -v n1="$N1" -v n2="$N2" -v lim="$LIMIT" 'BEGIN {
        d = n2 - n1; base = (o2 - o1) / d; with = (w2 - w1) / d; add = with - base;
        printf "%14.1f %14.1f %14.1f  %s", base, with, add, (add <= lim ? "yes" : "NO"); }')
    printf '%-10s %s\n' "$k" "$row"
    case "$row" in *NO) status=1 ;; esac
done

if [ "${NO_TIME:-0}" != 1 ]; then
    echo
    echo "time: $TIME_N calls per kind, median of $TIME_RUNS runs (plain and preload runs alternate)"
    for r in $(seq 1 "$TIME_RUNS"); do
        for m in 0 1; do
            pre=""
            [ "$m" = 1 ] && pre="$lib"
            f="$tmp/time.$m.$r"
            LD_PRELOAD="$pre" "$prog" "$TIME_N" all --time >"$f" 2>&1 || die "timed run failed: $(cat "$f")"
            for k in $KINDS; do check_output "$m" "$k" "$TIME_N" "$f"; done
        done
    done
    printf '%-10s %14s %14s %14s\n' kind "MPI ns/call" "+ncclmpi" "added ns/call"
    median() { # MODE KIND
        for r in $(seq 1 "$TIME_RUNS"); do sed -n "s/^kind=$2 .*ns_per_call=\([0-9.]*\).*/\1/p" "$tmp/time.$1.$r"; done |
            sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
    }
    for k in $KINDS; do
        t0=$(median 0 "$k")
        t1=$(median 1 "$k")
        awk -v k="$k" -v a="$t0" -v b="$t1" 'BEGIN { printf "%-10s %14.2f %14.2f %14.2f\n", k, a, b, b - a }'
    done
fi

echo
if [ "$status" = 0 ]; then
    echo "PASS: every kind adds <= $LIMIT instructions per call"
else
    echo "FAIL: a kind adds more than $LIMIT instructions per call"
fi
exit "$status"
