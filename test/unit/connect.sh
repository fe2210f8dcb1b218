#!/bin/sh
# connect.sh BUILDDIR: first uses of NCCL's connections in orders that differ by rank
# (test/unit/connect_prog.c) at 2 and 3 ranks, each with a device of its own on the stand-in
# driver (its streams running later, as a GPU's) and the stand-in NCCL's several-rank mode, which
# connects an algorithm or a peer at its first use, on the host, waiting for the peers without MPI
# progress, as NCCL does by default. With ncclmpi's default (NCCLMPI_CONNECT=init: connections
# made at the communicator's creation by a ladder of collectives and an exchange with every peer)
# and with NCCLMPI_CONNECT=all (NCCL_RUNTIME_CONNECT=0) every scenario must pass; with
# NCCLMPI_CONNECT=lazy (NCCL's own first-use connections) the same programs must hang at a
# connection: the stand-in's model of the hazard holds, and the test can fail.
b=$1
d="$b/connect_test"
prog="$b/test/unit/connect_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in connect "$b" "$d" "$prog"
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0
fail=0
for np in 2 3; do
  stand_in_run connect_prog "$b" "$d" "connections at creation" $np "$prog" || fail=1
done
NCCLMPI_COALESCE=0 stand_in_run connect_prog "$b" "$d" "NCCLMPI_COALESCE=0" 3 "$prog" || fail=1
# more ranks than NCCLMPI_CONNECT_PEERS: sends and receives connect at the first blocking
# alltoall (after a barrier of the real MPI), nonblocking ones before it are staged
NCCLMPI_CONNECT_PEERS=2 CONNECT_PROG_COLD=1 stand_in_run connect_prog "$b" "$d" "NCCLMPI_CONNECT_PEERS=2 (cold)" 3 "$prog" cold || fail=1
# NCCL_RUNTIME_CONNECT=0 set by ncclmpi: the stand-in connects its algorithms at creation
NCCLMPI_CONNECT=all stand_in_run connect_prog "$b" "$d" "NCCLMPI_CONNECT=all" 3 "$prog" || fail=1
# (Open MPI 5's shared-memory transport delivers the progress scenario's 4 MiB message without
# the sender's progress: there it passes, which the run's own checks confirm)
ompi5=0
grep -q '^#define NM_BUILD_MPI "Open MPI 5' "$b/nm_build.h" 2>/dev/null && ompi5=1
for sc in coll alltoall progress; do
  NCCLMPI_CONNECT=lazy TMPDIR="$d" timeout -k 5 15 "$b/test/run_mpi.sh" 2 preload "$prog" $sc >"$d/out" 2>"$d/err"
  rc=$?
  [ $rc = 77 ] && exit 77
  if [ $sc = progress ] && [ $ompi5 = 1 ] && [ $rc = 0 ] && grep -q "connect_prog: ok" "$d/out"; then
    echo "connect: NCCLMPI_CONNECT=lazy, $sc, 2 ranks: passes under Open MPI 5 (no sender progress needed)"
  elif [ $rc = 124 ] && grep -q "waits to connect" "$d/err"; then
    echo "connect: NCCLMPI_CONNECT=lazy, $sc, 2 ranks: hangs at a connection made at first use, as expected"
  else
    echo "connect: FAIL: NCCLMPI_CONNECT=lazy, $sc, 2 ranks: expected a hang at a first-use connection (exit $rc)"
    head -5 "$d/out"; tail -10 "$d/err"
    fail=1
  fi
done
exit $fail
