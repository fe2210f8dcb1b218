#!/bin/sh
# mt_engine.sh BUILDDIR: the execution engine under MPI_THREAD_MULTIPLE on the stand-in CUDA
# driver and NCCL (test/unit/mt_engine_prog.c): four threads, each on its own communicator, run
# bursts of nonblocking device collectives, blocking ones, explicit groups, broadcasts, host calls
# and communicators duplicated, used (the first collective making or taking over an NCCL
# communicator) and freed with a request outstanding, all at once; every result checked; some new
# communicator must have taken over a kept one (NCCLMPI_STATS). NM_MT_ENGINE_PRELOAD: libraries
# preloaded first (a sanitizer runtime).
b=$1
d="$b/mt_engine_test"
prog="$b/test/unit/mt_engine_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mt_engine "$b" "$d" "$prog"
NM_TEST_PRELOAD="${NM_MT_ENGINE_PRELOAD:+$NM_MT_ENGINE_PRELOAD:}$NM_TEST_PRELOAD"
export NCCLMPI_STATS=1  # (the kept NCCL communicators the threads' new communicators took over)
export NCCLMPI_FUSE=all  # (one rank: the explicit groups' allreduces share calls only so)
timeout 120 "$b/test/run_mpi.sh" 1 preload "$prog" >"$d/out" 2>"$d/err"
rc=$?
cat "$d/out"
[ $rc = 77 ] && exit 77
if [ $rc != 0 ] || ! grep -q "mt_engine_prog: ok" "$d/out"; then
  echo "mt_engine: FAIL (exit $rc$([ $rc = 124 ] && echo ': timed out, a hang'))"
  tail -30 "$d/err"
  exit 1
fi
line=$(grep "device communicators" "$d/err")
echo "mt_engine: ${line#\[ncclmpi\] }"
case "$line" in
*" 0 taken over"*|"") echo "mt_engine: FAIL: no new communicator took over a kept NCCL communicator"; exit 1 ;;
esac
