#!/bin/sh
# fail_inject.sh BUILDDIR: the failure-injection matrix of the NCCL route on the stand-ins (a
# device per rank, streams running later as a GPU's, the stand-in NCCL's several ranks). For each
# scenario of test/unit/fail_inject_prog.c, a traced run without failures lists the stand-in calls
# (allocations, copies, events, kernels, NCCL calls) the failing rank makes inside the scenario's
# window; then, for each kind of call, its first call in the window fails on that rank alone
# (FAKE_FAIL, test/unit/fake_fail.h). Every case must end within the time limit (a hang fails it),
# with the same error class on every rank (0 where the failure was absorbed: a creation that falls
# back to the staged path on every rank alike, a completion flag replaced by an event), and a
# blocking allreduce on a fresh duplicate of MPI_COMM_WORLD must then be right on every rank.
# "runs" fails nothing: a datatype of more than 65536 runs on one rank alone must work.
# A failed NCCL call of a coalesced burst (burst) ends on the peers through the failing rank's
# notice, heard while they wait for the next group's agreement round.
# A failed NCCL call of the creation's connection ladder (create) can leave a peer inside its own
# call of that step, waiting on the host for the failing rank's side of a connection at first
# use. A peer's ncclCommAbort does not end that wait (measured on an H100, NCCL 2.28.3, 2 ranks,
# socket transport, test/gpu/nccl_abort_probe.c: the waiting rank's first collective or
# send/receive was still inside NCCL 6 s after its peer's abort; the stand-in NCCL waits on as
# well), so no class reaches that peer: the ladder's wait is fatal, and with NCCLMPI_TIMEOUT=3 the
# job must end within the time limit with an error naming it (doc/design.md, "Failures end in
# errors"). Each NCCL call of the failing rank's ladder window is failed that way; a case that
# ends cleanly instead (a failure every rank learns at the step's agreement, none of them blocked
# in NCCL) must pass as the other cases do. Every case says how it ended.
# ncclCommInitRankConfig failing on one rank leaves its peers inside NCCL's own initialization,
# which nothing can end but the job's end: with NCCLMPI_TIMEOUT the job must end, with an error
# naming that wait, instead of hanging (doc/design.md, "Failures end in errors"). Without
# NCCLMPI_TIMEOUT the failing rank itself ends the job after NCCLMPI_CREATE_GRACE (3 here), naming
# its own failure: the ladder and the initialization are failed that way too (without the grace
# both wait forever).
b=$1
d="$b/fail_inject_test"
prog="$b/test/unit/fail_inject_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in fail_inject "$b" "$d" "$prog"
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0
# a failing run must make the calls its traced run made: a coalescing window longer than the test
# (100 s) makes a burst one group every time (with the default 20 us, how many of its operations
# a loaded machine launches alone varies from run to run, and the nth call of a kind moved out of
# the window, into the fresh communicator's creation)
export NCCLMPI_COALESCE_WINDOW=100000000
calls='cuMemAlloc|cuMemAllocAsync|cuMemAllocHost|cuMemHostAlloc|cuMemcpy|cuMemcpyAsync|cuMemcpy2DAsync|cuMemsetD8Async|cuLaunchKernel|cuEventCreate|cuEventRecord|cuStreamWriteValue64|ncclGetUniqueId|ncclGroupStart|ncclGroupEnd|ncclAllReduce|ncclBroadcast|ncclReduce|ncclAllGather|ncclReduceScatter|ncclSend|ncclRecv'
fail=0
cases=0
# the watchdog's text for the ladder's fatal wait (kNcclConnectWait, src/core/comm/comm_state.cc)
ladder_wait="connect the communicator's algorithms or peers at their first use"
# run NP SCENARIO: the program, FAKE_FAIL as set by the caller; 1 on a hang or a crash
run() {
  TMPDIR="$d" timeout -k 5 45 "$b/test/run_mpi.sh" "$1" preload "$prog" "$2" >"$d/out" 2>"$d/err"
  rc=$?
  [ $rc = 77 ] && exit 77
  return $rc
}
# inside RANK: 0 when the last run's injected failure (fake_fail.h's "(fails)" line) came inside
# RANK's window, or when the run injected none
inside() {
  awk -v r="$1" '
    $0 ~ "^fail_inject: r" r " window begin" { w = 1 }
    $0 ~ "^fail_inject: r" r " window end" { w = 0 }
    $1 == "fake_fail" && $2 == "r" r && / \(fails\)$/ && !w { out = 1 }
    END { exit out }' "$d/err"
}
# verdict NP WHAT: the last run's classes agree and the fresh communicator worked on every rank
verdict() {
  classes=$(sed -n 's/^fail_inject: rank [0-9]* class \([0-9]*\)$/\1/p' "$d/out" | sort -u)
  nclass=$(grep -c '^fail_inject: rank [0-9]* class ' "$d/out")
  nfresh=$(grep -c '^fail_inject: rank [0-9]* fresh ok' "$d/out")
  if [ $rc != 0 ] || [ "$nclass" != "$1" ] || [ "$(echo "$classes" | wc -l)" != 1 ] || [ "$nfresh" != "$1" ] ||
     ! grep -q '^fail_inject_prog: ok' "$d/out"; then
    echo "fail_inject: FAIL: $2 (exit $rc$([ $rc = 124 ] && echo ': timed out, a hang'))"
    sed -n '/^fail_inject/p' "$d/out" | head -10
    grep -v '^fake_fail' "$d/err" | tail -12
    fail=1
    return 1
  fi
  echo "fail_inject: $2: class $classes on every rank, fresh communicator ok"
}
# window NP RANK SCENARIO: a traced run without failures, which must pass; $d/calls then holds
# FAKE_FAIL specs of the first call of each kind RANK makes inside the scenario's window
window() {
  FAKE_FAIL_TRACE=1 run "$1" "$3"
  verdict "$1" "$3, $1 ranks, no failure" || return 1
  awk -v r="$2" -v pat="^($calls)\$" '
    $0 ~ "^fail_inject: r" r " window begin" { w = 1 }
    $0 ~ "^fail_inject: r" r " window end" { w = 0 }
    w && $1 == "fake_fail" && $2 == "r" r && $3 ~ pat && !seen[$3]++ { print $3 ":" r ":" $4 }' "$d/err" >"$d/calls"
}
# matrix NP RANK SCENARIO [nonccl]: each kind of call of RANK's window failed in turn (nonccl:
# except the NCCL calls)
matrix() {
  np=$1 r=$2 sc=$3 skip='^$'
  [ "${4:-}" = nonccl ] && skip='^nccl'
  window "$np" "$r" "$sc" || return
  grep -v "$skip" "$d/calls" >"$d/cases"
  for spec in $(cat "$d/cases"); do
    cases=$((cases + 1))
    FAKE_FAIL=$spec run "$np" "$sc"
    if ! inside "$r"; then
      echo "fail_inject: FAIL: $sc, $np ranks, FAKE_FAIL=$spec (exit $rc): the failure came outside the window: this run's calls differed from the traced run's"
      grep '^fake_fail.*(fails)' "$d/err"
      fail=1
      continue
    fi
    verdict "$np" "$sc, $np ranks, FAKE_FAIL=$spec"
  done
}
# the failing rank's own message when its peers stay inside NCCL (util/watchdog.c, fatal_abort)
own_wait="its peers have not answered in [0-9]* s (NCCLMPI_CREATE_GRACE=3)"
# ladder NP RANK [grace]: each NCCL call of RANK's creation window failed in turn, with
# NCCLMPI_TIMEOUT=3: the job ends through the ladder's fatal wait, naming it, or cleanly as a
# matrix case; grace: without NCCLMPI_TIMEOUT, NCCLMPI_CREATE_GRACE=3: the failing rank ends the
# job naming its own failed connection, or the case ends cleanly
ladder() {
  np=$1 r=$2
  if [ "${3:-}" = grace ]; then
    how="NCCLMPI_CREATE_GRACE=3" want="$own_wait" named="the failing rank's own failed connection"
  else
    how="NCCLMPI_TIMEOUT=3" want="$ladder_wait" named="the ladder's fatal wait"
  fi
  window "$np" "$r" create || return
  grep '^nccl' "$d/calls" >"$d/cases"
  for spec in $(cat "$d/cases"); do
    cases=$((cases + 1))
    t0=$(date +%s)
    if [ "${3:-}" = grace ]; then
      NCCLMPI_CREATE_GRACE=3 FAKE_FAIL=$spec run "$np" create
    else
      NCCLMPI_TIMEOUT=3 FAKE_FAIL=$spec run "$np" create
    fi
    took=$(($(date +%s) - t0))
    if [ $rc = 0 ]; then
      verdict "$np" "create, $np ranks, $how FAKE_FAIL=$spec: ended cleanly in $took s" || true
    elif [ $rc != 124 ] && [ $rc != 137 ] && grep -q "$want" "$d/err"; then
      echo "fail_inject: create, $np ranks, $how FAKE_FAIL=$spec: the job ended in $took s (exit $rc) naming $named"
    else
      echo "fail_inject: FAIL: create, $np ranks, $how FAKE_FAIL=$spec: exit $rc after $took s$([ $rc = 124 ] && echo ': timed out, a hang'), $named not reported"
      sed -n '/^fail_inject/p' "$d/out" | head -10
      grep -v '^fake_fail' "$d/err" | tail -8
      fail=1
    fi
  done
}
matrix 2 1 create nonccl
ladder 2 1
matrix 2 1 allreduce
matrix 2 0 bcast
matrix 2 1 iallreduce
matrix 2 1 burst
matrix 3 0 create nonccl
ladder 3 0
matrix 3 2 allreduce
matrix 3 1 bcast
matrix 3 0 burst
ladder 2 1 grace
# ncclCommInitRankConfig failing on one rank: its peers wait inside NCCL's initialization, where
# no notice reaches them; with NCCLMPI_TIMEOUT that wait is fatal, and the job ends with an error
# naming it (util/watchdog.h) instead of waiting for ever; without it the failing rank ends the job
# after NCCLMPI_CREATE_GRACE, naming its own failure
for np in 2 3; do
  t0=$(date +%s)
  NCCLMPI_CREATE_GRACE=3 FAKE_FAIL=ncclCommInitRankConfig:$((np - 1)):1 run $np create
  took=$(($(date +%s) - t0))
  cases=$((cases + 1))
  if [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 ] || ! grep -q "$own_wait" "$d/err" ||
     ! grep -q "ncclCommInitRank) failed on this rank" "$d/err"; then
    echo "fail_inject: FAIL: create, $np ranks, NCCLMPI_CREATE_GRACE=3, ncclCommInitRankConfig failed on rank $((np - 1)): exit $rc after $took s$([ $rc = 124 ] && echo ': timed out, a hang'), the failing rank did not end the job"
    grep -v '^fake_fail' "$d/err" | tail -8
    fail=1
  else
    echo "fail_inject: create, $np ranks, NCCLMPI_CREATE_GRACE=3, ncclCommInitRankConfig failed on rank $((np - 1)): the failing rank ended the job in $took s (exit $rc), naming its failure"
  fi
done
for np in 2 3; do
  t0=$(date +%s)
  NCCLMPI_TIMEOUT=3 FAKE_FAIL=ncclCommInitRankConfig:$((np - 1)):1 run $np create
  took=$(($(date +%s) - t0))
  cases=$((cases + 1))
  if [ $rc = 0 ] || [ $rc = 124 ] || [ $rc = 137 ] || ! grep -q "inside NCCL's initialization of the communicator" "$d/err"; then
    echo "fail_inject: FAIL: create, $np ranks, ncclCommInitRankConfig failed on rank $((np - 1)): exit $rc after $took s, no fatal wait reported"
    grep -v '^fake_fail' "$d/err" | tail -8
    fail=1
  else
    echo "fail_inject: create, $np ranks, ncclCommInitRankConfig failed on rank $((np - 1)): the job ended in $took s (exit $rc) naming NCCL's initialization"
  fi
done
for np in 2 3; do
  run $np runs
  verdict $np "runs (a datatype of more than 65536 runs on rank 0 alone), $np ranks" || true
  [ "$(sed -n 's/^fail_inject: rank [0-9]* class \([0-9]*\)$/\1/p' "$d/out" | sort -u)" = 0 ] ||
    { echo "fail_inject: FAIL: runs, $np ranks: an error where packing on the host works"; fail=1; }
done
echo "fail_inject: $cases injected failures"
exit $fail
