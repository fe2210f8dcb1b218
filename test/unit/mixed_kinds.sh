#!/bin/sh
# mixed_kinds.sh BUILDDIR: ranks that pass different kinds of memory to one collective (rank 1
# host memory, the others the stand-in's device memory: test/unit/mixed_kinds_prog.c) break
# ncclmpi's contract unless NCCLMPI_AGREE=1; with NCCLMPI_TIMEOUT=5 the call must end in an error
# on every rank within 30 s, never hang. The device ranks' waits (the NCCL side's creation, or the
# NCCL operation on a made one) end at 5 s with an error naming the call, the communicator and the
# likely cause; the host rank waits inside the real MPI's blocking call, which only the job's end
# can stop: its watchdog aborts the job at 1.5 x 5 + 1 s, naming the same. With MPI_ERRORS_RETURN
# (the device ranks linger 8 s after their error) every rank's own message must be there; with the
# default handler the first error ends the job. Both with the ranks sharing the stand-in's GPU
# (the creation's agreement is where the ranks part) and with a device each on the stand-in NCCL
# (the communicator made first on device memory everywhere: the NCCL operation is where they part).
# With NCCLMPI_AGREE=1 the same calls are right (also with the timeout: the vote is then
# nonblocking).
b=$1
d="$b/mixed_kinds_test"
prog="$b/test/unit/mixed_kinds_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mixed_kinds "$b" "$d" "$prog"
fail=0
cause='ranks may have passed different kinds of memory (see NCCLMPI_AGREE)'
# run NP CALL ARGS...: the program with NCCLMPI_TIMEOUT=5 under a 40 s limit; sets $took
run() {
  _np=$1
  shift
  _t0=$(date +%s)
  NCCLMPI_TIMEOUT=5 TMPDIR="$d" timeout -k 5 40 "$b/test/run_mpi.sh" $_np preload "$prog" "$@" >"$d/out" 2>"$d/err"
  _rc=$?
  took=$(($(date +%s) - _t0))
  [ $_rc = 77 ] && exit 77
  # (Open MPI 5's launcher writes NUL bytes into the forwarded output, even at a line's start)
  cat "$d/out" "$d/err" | tr -d '\000' >"$d/all"
  if [ $_rc = 0 ] || [ $_rc = 124 ] || [ $_rc = 137 ] || [ $took -gt 30 ]; then
    echo "mixed_kinds: FAIL: $* at $_np ranks${MODE:+ ($MODE)}: exit $_rc after $took s (expected an error within 30 s)"
    tail -15 "$d/all"
    return 1
  fi
}
bad() { echo "mixed_kinds: FAIL: $1"; tail -15 "$d/all"; fail=1; }
# every device rank's error through MPI_ERRORS_RETURN, the host rank's abort
expect_all() {  # NP CALL WHAT: WHAT the device ranks' message says
  _np=$1 _call=$2 _what=$3
  run $_np "$_call" return 8 $WARM || { fail=1; return; }
  r=0
  while [ $r -lt $_np ]; do
    if [ $r = 1 ]; then
      grep -aq "\[ncclmpi r1\] ERROR CALL MPI_[A-Za-z]* on comm0 has waited [0-9]* s in the real MPI, its buffers in host memory on this rank (NCCLMPI_TIMEOUT=5), where ncclmpi cannot end the call: $cause" "$d/all" ||
        bad "$_call, $_np ranks${MODE:+ ($MODE)}: the host rank did not end its wait with the expected error"
    else
      # the call, the communicator, what waited, the deadline and the cause
      grep -a "^mixed_kinds_prog: rank $r: MPI_[A-Za-z() ]* failed: ncclmpi: MPI_[A-Za-z]*: " "$d/all" | grep -aF "comm0{rank $r/$_np," |
        grep -F "$_what" | grep -aqF "did not complete in 5 s (NCCLMPI_TIMEOUT): $cause" ||
        bad "$_call, $_np ranks${MODE:+ ($MODE)}: rank $r did not get the expected error"
    fi
    r=$((r + 1))
  done
  echo "mixed_kinds: $_call, $_np ranks${MODE:+ ($MODE)}: every rank ended in its error in $took s"
}

# the ranks share the stand-in's GPU: they part at the NCCL side's creation (iallreduce: the
# nonblocking call is staged on every rank and right; the next blocking collective creates)
for np in 2 3; do
  for call in allreduce bcast iallreduce; do
    expect_all $np $call "creating its NCCL communicator"
  done
done
# the default handler: the first rank's error aborts the job, with its message
if run 3 allreduce; then
  # (Open MPI 4.1's launcher can lose the handler's own text when two ranks report at once:
  # "ORTE_ERROR_LOG: Data unpack would read past end of buffer in file .../show_help.c"; the
  # job's error exit and ncclmpi's message are what this checks then; MPICH says "Abort(CODE) on
  # node R: Fatal error in MPI_Comm_call_errhandler: ...")
  if { grep -aq "MPI_ERRORS_ARE_FATAL" "$d/all" || grep -aq "ORTE_ERROR_LOG: .*show_help\.c" "$d/all" ||
    grep -aq "^Abort([0-9]*) on node [0-9]*: Fatal error in MPI_Comm_call_errhandler: ncclmpi: " "$d/all"; } &&
    grep -aq "did not complete in 5 s (NCCLMPI_TIMEOUT): $cause" "$d/all"; then
    echo "mixed_kinds: allreduce, 3 ranks, MPI_ERRORS_ARE_FATAL: the job ended with the error in $took s"
  else
    bad "allreduce, 3 ranks, MPI_ERRORS_ARE_FATAL: the job did not end with the error"
  fi
else
  fail=1
fi
# every rank on device memory, rank 1 60 s late: the others' MPI_Wait for the staged
# MPI_Iallreduce waits in the real MPI's request, marked fatal: the job ends at 1.5 x 5 + 1 s
if run 2 late; then
  grep -aq "^\[ncclmpi r0\] ERROR CALL MPI_Wait has waited [0-9]* s for its device requests (NCCLMPI_TIMEOUT=5)" "$d/all" ||
    bad "late, 2 ranks: rank 0's MPI_Wait did not end with the expected error"
  echo "mixed_kinds: late peer, 2 ranks: rank 0's MPI_Wait ended the job in $took s"
else
  fail=1
fi
# a device each, NCCL communicators on the stand-in NCCL, made first on device memory everywhere
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0
MODE="NCCL route" WARM=warm expect_all 3 allreduce "MPI_Allreduce on"
MODE="NCCL route" WARM=warm expect_all 2 bcast "MPI_Bcast on"
unset FAKE_NCCL_SHM FAKE_CUDA_DEVICE_PER_RANK FAKE_CUDA_ASYNC NCCLMPI_ONESHOT
# NCCLMPI_AGREE=1: right, with and without a timeout
for t in 0 5; do
  for call in allreduce bcast iallreduce; do
    NCCLMPI_AGREE=1 NCCLMPI_TIMEOUT=$t stand_in_run mixed_kinds_prog "$b" "$d" "NCCLMPI_AGREE=1 NCCLMPI_TIMEOUT=$t $call" 3 "$prog" $call || fail=1
  done
done
exit $fail
