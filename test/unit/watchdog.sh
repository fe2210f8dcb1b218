#!/bin/sh
# watchdog.sh BUILDDIR: a device-buffer call that waits for a late peer says so. Two ranks on the
# stand-in CUDA driver and NCCL (test/unit/fake_cuda.c, fake_nccl.c; they share its one "GPU", so
# device collectives are staged through the real MPI); rank 1 joins two calls 2.5 s late, rank 0 a third
# (test/unit/watchdog_prog.c). With NCCLMPI_WARN_AFTER=1, rank 0 must warn once about the
# blocking MPI_Allreduce waiting in the real MPI and once about the MPI_Wait, rank 1 once about the
# staged MPI_File_write_ordered it waits in for rank 0 and once about its MPI_Put (the first of its
# access epoch) waiting for rank 0's late MPI_Win_post on a window in device memory; with
# NCCLMPI_WARN_AFTER=0 nobody warns; with NCCLMPI_AGREE=1 the MPI_Allreduce waits (and is named)
# in its route vote. The results are checked in these runs. Then rank 1 is killed
# before the MPI_Allreduce (Open MPI's --enable-recovery keeps rank 0 running, waiting for good):
# rank 0 must name its wait before the run is stopped at 6 s.
b=$1
d="$b/watchdog_test"
fail() { echo "watchdog: FAIL: $*"; tail -20 "$d/err"; exit 1; }
prog="$b/test/unit/watchdog_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in watchdog "$b" "$d" "$prog"
# a window in the stand-in's device memory (its CUDA IPC), where a process can open another's
# descriptors; without, that part of the program is left out
ipc=0
stand_in_ipc && ipc=1 && export FAKE_CUDA_IPC=1

NCCLMPI_WARN_AFTER=1 "$b/test/run_mpi.sh" 2 preload "$prog" 2.5 >"$d/out" 2>"$d/err" || fail "the run failed"
grep -q "watchdog_prog: ok" "$d/out" || fail "wrong results: $(cat "$d/out")"
w0=$(grep -c '^\[ncclmpi r0\] WARN' "$d/err"); w1=$(grep -c '^\[ncclmpi r1\] WARN' "$d/err")
grep -q '^\[ncclmpi r0\] WARN CALL MPI_Allreduce has waited [0-9]* s in the real MPI, its device buffers staged' "$d/err" ||
  fail "rank 0 did not warn about its MPI_Allreduce"
grep -q '^\[ncclmpi r0\] WARN CALL MPI_Wait has waited [0-9]* s for its requests' "$d/err" ||
  fail "rank 0 did not warn about its MPI_Wait"
# the likely causes, memory kinds that differ by rank among them
grep -q '^\[ncclmpi r0\] WARN CALL MPI_Allreduce has waited .* keeps it waiting, or ranks passed different kinds of memory to one collective (see NCCLMPI_AGREE)$' "$d/err" ||
  fail "rank 0's warning does not name the likely causes"
grep -q '^\[ncclmpi r1\] WARN CALL MPI_File_write_ordered has waited [0-9]* s in the real MPI, its device buffers staged' "$d/err" ||
  fail "rank 1 did not warn about its MPI_File_write_ordered"
[ "$w0" -eq 2 ] || fail "rank 0 warned $w0 times (expected 2)"
if [ $ipc = 1 ]; then
  # (Open MPI 4.1's MPI_Win_start returns at once, and the first MPI_Put waits for the post;
  # Open MPI 5's waits for it itself)
  grep -Eq '^\[ncclmpi r1\] WARN CALL MPI_(Put|Win_start) has waited [0-9]* s for the matching MPI_Win_post' "$d/err" ||
    fail "rank 1 did not warn about its MPI_Put (or MPI_Win_start) waiting for the post"
  [ "$w1" -eq 2 ] || fail "rank 1 warned $w1 times (expected 2, about the file write and the access epoch)"
else
  [ "$w1" -eq 1 ] || fail "rank 1 warned $w1 times (expected 1, about the file write)"
fi

NCCLMPI_WARN_AFTER=0 "$b/test/run_mpi.sh" 2 preload "$prog" 1.5 >"$d/out" 2>"$d/err" || fail "the run without warnings failed"
grep -q "watchdog_prog: ok" "$d/out" || fail "wrong results without warnings: $(cat "$d/out")"
grep -q 'WARN' "$d/err" && fail "a warning with NCCLMPI_WARN_AFTER=0"
# NCCLMPI_AGREE=1: the blocking call waits in its route vote first, and says so
NCCLMPI_WARN_AFTER=1 NCCLMPI_AGREE=1 "$b/test/run_mpi.sh" 2 preload "$prog" 2.5 >"$d/out" 2>"$d/err" || fail "the run with NCCLMPI_AGREE=1 failed"
grep -q "watchdog_prog: ok" "$d/out" || fail "wrong results with NCCLMPI_AGREE=1: $(cat "$d/out")"
grep -q '^\[ncclmpi r0\] WARN CALL MPI_Allreduce has waited [0-9]* s agreeing on the route' "$d/err" ||
  fail "rank 0 did not name its MPI_Allreduce's route vote"

NCCLMPI_WARN_AFTER=1 timeout 6 "$b/test/run_mpi.sh" 2 preload --enable-recovery --mca orte_abort_on_non_zero_status 0 \
  "$prog" 1 kill >"$d/out" 2>"$d/err"
grep -q '^\[ncclmpi r0\] WARN CALL MPI_Allreduce has waited [0-9]* s in the real MPI' "$d/err" ||
  fail "rank 0, its peer killed, did not name its MPI_Allreduce"
echo "watchdog: the late peer's waits were named (rank 0: 2 warnings), none without NCCLMPI_WARN_AFTER, the route vote's too; the wait for a killed peer was named"
