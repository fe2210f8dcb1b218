#!/bin/sh
# startup_overhead.sh BUILDDIR [N]
# Times N runs (default 20) of `mpirun -np 2 init_finalize` (MPI_Init + MPI_Finalize) through
# test/run_mpi.sh, without ncclmpi (plain) and with it (preload), interleaved, after one
# untimed warm-up of each; prints the medians and their ratio. Fails only if a run fails:
# the numbers are for the README, not a pass criterion. Stops early (after at least 5 runs
# of each) once STARTUP_BUDGET_S seconds (default 35) have passed, and says so.
B=${1:?usage: startup_overhead.sh BUILDDIR [N]}
N=${2:-20}
BUDGET=${STARTUP_BUDGET_S:-35}
run="$B/test/run_mpi.sh"
prog="$B/test/mpi/init_finalize"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nm_startup.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

one() { # mode [file]: run once; append the wall time in microseconds to file
    t0=$(date +%s%N)
    if ! "$run" 2 "$1" "$prog" >"$tmp/out" 2>&1; then
        echo "startup_overhead: the $1 run failed:" >&2
        cat "$tmp/out" >&2
        exit 1
    fi
    t1=$(date +%s%N)
    [ -n "$2" ] && echo $(((t1 - t0) / 1000)) >>"$2"
    return 0
}

one plain
one preload
start=$(date +%s)
i=0
while [ "$i" -lt "$N" ]; do
    if [ $((i % 2)) -eq 0 ]; then
        one plain "$tmp/plain"; one preload "$tmp/preload"
    else
        one preload "$tmp/preload"; one plain "$tmp/plain"
    fi
    i=$((i + 1))
    if [ "$i" -lt "$N" ] && [ "$i" -ge 5 ] && [ $(($(date +%s) - start)) -ge "$BUDGET" ]; then
        echo "startup_overhead: time budget of ${BUDGET}s reached after $i of $N runs of each"
        break
    fi
done

median() { sort -n "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
mp=$(median "$tmp/plain")
ml=$(median "$tmp/preload")
awk -v p="$mp" -v l="$ml" -v n="$i" 'BEGIN {
    printf "startup of mpirun -np 2 (MPI_Init + MPI_Finalize), median of %d runs each:\n", n
    printf "  without ncclmpi   %8.1f ms\n", p / 1000
    printf "  LD_PRELOAD        %8.1f ms\n", l / 1000
    printf "  ratio             %8.3f  (difference %+.1f ms)\n", l / p, (l - p) / 1000
}'
