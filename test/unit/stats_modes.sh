#!/bin/sh
# stats_modes.sh BUILDDIR: NCCLMPI_STATS at MPI_Finalize of a 3-rank run of test/mpi/hostonly:
# 1 = one summary from rank 0 (sum, [min-max]), rank = a table per rank, file:PATH = one file per
# rank (%r = rank). Exit 77 (skipped) while the finalize hook still prints per-rank tables only.
b=$1
run="$b/test/run_mpi.sh"
prog="$b/test/mpi/hostonly"
d="$b/stats_test"
rm -rf "$d"; mkdir -p "$d"
for v in $(env | sed -n 's/^\(NCCLMPI_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
fail() { echo "stats: FAIL: $*"; cat "$d/err"; exit 1; }
[ -x "$prog" ] || { echo "stats: $prog not built"; exit 77; }

NCCLMPI_STATS=1 "$run" 3 preload "$prog" >"$d/out" 2>"$d/err" || fail "NCCLMPI_STATS=1 run"
if ! grep -q 'summed over 3 ranks' "$d/err"; then
  grep -q '^\[ncclmpi r[0-9]\] function' "$d/err" && {
    echo "stats: skipped: MPI_Finalize prints per-rank tables (nm_before_finalize calls ncclmpi_print_stats, not nm_stats_finalize)"
    exit 77; }
  fail "NCCLMPI_STATS=1: no summary"
fi
[ "$(grep -c 'summed over' "$d/err")" = 1 ] || fail "NCCLMPI_STATS=1: more than one summary"
grep -q '^\[ncclmpi r' "$d/err" && fail "NCCLMPI_STATS=1: per-rank lines"
grep -Eq '^\[ncclmpi\] Init +3 ' "$d/err" || fail "NCCLMPI_STATS=1: Init is not 3 calls"
grep -Eq '^\[ncclmpi\] \(all functions\) ' "$d/err" || fail "NCCLMPI_STATS=1: no total"

NCCLMPI_STATS=rank "$run" 3 preload "$prog" >"$d/out" 2>"$d/err" || fail "NCCLMPI_STATS=rank run"
for r in 0 1 2; do grep -Eq "^\[ncclmpi r$r\] Init +1 " "$d/err" || fail "NCCLMPI_STATS=rank: no table of rank $r"; done
grep -q 'summed over' "$d/err" && fail "NCCLMPI_STATS=rank: a summary"

NCCLMPI_STATS="file:$d/s.%r.txt" "$run" 3 preload "$prog" >"$d/out" 2>"$d/err" || fail "NCCLMPI_STATS=file run"
for r in 0 1 2; do
  grep -q "rank $r of 3" "$d/s.$r.txt" 2>/dev/null && grep -Eq '^Init +1 ' "$d/s.$r.txt" || fail "NCCLMPI_STATS=file: s.$r.txt"
done
grep -q 'ncclmpi' "$d/err" && fail "NCCLMPI_STATS=file: prints to stderr"
NCCLMPI_STATS="file:$d/plain" "$run" 2 preload "$prog" >"$d/out" 2>"$d/err" || fail "NCCLMPI_STATS=file (no %r) run"
[ -s "$d/plain.0" ] && [ -s "$d/plain.1" ] || fail "NCCLMPI_STATS=file without %r: no PATH.RANK files"
echo "stats: summary, rank and file modes ok"
