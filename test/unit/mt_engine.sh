#!/bin/sh
# mt_engine.sh BUILDDIR: the execution engine under MPI_THREAD_MULTIPLE on the stand-in CUDA
# driver and NCCL (test/unit/mt_engine_prog.c): four threads, each on its own communicator, run
# bursts of nonblocking device collectives, blocking ones, explicit groups, broadcasts, host calls
# and communicators duplicated, used (the first collective making or taking over an NCCL
# communicator) and freed with a request outstanding, all at once; every result checked; some new
# communicator must have taken over a kept one (NCCLMPI_STATS). Then at 2 and 3 ranks on the
# stand-in NCCL's shared-memory mode. NM_MT_ENGINE_PRELOAD: libraries
# preloaded first (a sanitizer runtime).
b=$1
d="$b/mt_engine_test"
prog="$b/test/unit/mt_engine_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mt_engine "$b" "$d" "$prog"
NM_TEST_PRELOAD="${NM_MT_ENGINE_PRELOAD:+$NM_MT_ENGINE_PRELOAD:}$NM_TEST_PRELOAD"
export NCCLMPI_STATS=1  # (the kept NCCL communicators the threads' new communicators took over)
export NCCLMPI_FUSE=all  # (one rank: the explicit groups' allreduces share calls only so)
# (the engine's own threads, without NCCLMPI_RENDEZVOUS's turns, which the hazard suite's threaded
# scenarios take: a creation staged by a busy turn leaves its communicator without an NCCL side, and
# this program's MPI_Iallreduce pending across MPI_Comm_free is then Open MPI 4.1's libnbc, which
# crashes there, also without ncclmpi on host buffers)
export NCCLMPI_RENDEZVOUS=off
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
# the same at 2 and 3 ranks, each with a device of its own, on the stand-in NCCL's shared-memory
# mode: the threads' communicators made, taken over and used at once on every rank, their NCCL
# calls compared across the ranks (a difference aborts), sums checked over the ranks
# (and at 2 ranks again with the stand-in's streams running later, as a GPU's: FAKE_CUDA_ASYNC=1)
for np in 2 3 2a; do
  case $np in 2a) np=2 async=1 ;; *) async= ;; esac
  FAKE_CUDA_ASYNC=$async FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 NCCLMPI_ONESHOT=0 timeout 120 "$b/test/run_mpi.sh" $np preload "$prog" \
    >"$d/out" 2>"$d/err"
  rc=$?
  if [ $rc != 0 ] || [ "$(grep -c "mt_engine_prog: ok" "$d/out")" != $np ]; then
    echo "mt_engine: FAIL at $np ranks (exit $rc$([ $rc = 124 ] && echo ': timed out, a hang'))"
    cat "$d/out"
    tail -30 "$d/err"
    exit 1
  fi
  echo "mt_engine: $np ranks${async:+, streams run later}: $(head -1 "$d/out" | sed 's/^mt_engine_prog: //'); $(grep "device communicators" "$d/err" | sed 's/^\[ncclmpi\] //')"
done
