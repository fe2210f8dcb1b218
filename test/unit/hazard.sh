#!/bin/sh
# hazard.sh BUILDDIR: the adversarial scenarios of test/gpu/gpu_hazard.c (per-rank layouts, empty
# ranks, threads, first calls crossing host messages, communicators freed with requests
# outstanding, churn, progress, coalescing triggers, explicit groups, injected faults, a fuzzer,
# envelope order, crossing first uses of NCCL's connections, cyclic communicator orders, a device
# reset before MPI_Finalize and before more device calls, a killed rank) on ncclmpi's NCCL route without a GPU: built as test/unit/hazard_stand_in against the
# stand-in CUDA runtime (fake_cudart.c) and driver, each rank with a device of its own, the
# stand-in NCCL's several-rank mode (which aborts where the ranks' calls differ, and connects at
# first use as NCCL does), streams running later as a GPU's. At 2 and 3 ranks (some at 4), each
# run under a time limit. HAZARD_SCENARIOS=... runs a subset, HAZARD_NP=... at those rank
# counts; HAZARD_ENV="NCCLMPI_X=v ..." adds settings (stand_in drops the caller's NCCLMPI_*).
b=$1
d="$b/hazard_test"
prog="$b/test/unit/hazard_stand_in"
. "$(dirname "$0")/stand_in.sh"
stand_in hazard "$b" "$d" "$prog"
export FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 FAKE_CUDA_KERNELS=1 NCCLMPI_ONESHOT=0
export NM_HAZARD_UNTIMED=1  # (dup_churn: times of oversubscribed stand-ins are not a GPU's)
scenarios=${HAZARD_SCENARIOS:-"layout_gather layout_bcast layout_reduce empty_gatherv_first empty_alltoallv_first
  empty_scatterv bottom signature_pipelined uint8_sum agree_mixed threads thread_comms first_nb_crossing comm_free_outstanding
  dup_churn use_churn use_churn_threads progress coalesce_triggers explicit_group field_range group_mix fault fault_nb fuzz envelope_order
  connect_crossing cyclic_comms reset_final reset_reuse"}
# at 4 ranks too: orders and agreements whose cycles need more than three ranks to show
np4="cyclic_comms connect_crossing coalesce_triggers explicit_group field_range group_mix fuzz threads comm_free_outstanding use_churn"
fail=0
for sc in $scenarios; do
  nps=${HAZARD_NP:-"2 3"}
  case " $np4 " in *" $sc "*) [ -z "${HAZARD_NP:-}" ] && nps="2 3 4" ;; esac
  for np in $nps; do
    case $sc in fault|fault_nb) [ $np = 3 ] && continue ;; cyclic_comms) [ $np = 2 ] && continue ;; esac
    # (as test/gpu/tests.cmake sets them: mixed memory kinds need the vote; the 20th launch of
    # world rank 0 fails, its peers time out)
    env="NCCLMPI_AGREE=0"
    case $sc in
    uint8_sum|agree_mixed) env="NCCLMPI_AGREE=1" ;;
    # (the stand-in's cuMemFree waiting for every stream, as the real one does: a thread's free
    # behind another thread's collective whose peer is held the same way stops without the
    # turns of NCCLMPI_RENDEZVOUS, which its default AUTO takes under MPI_THREAD_MULTIPLE)
    thread_comms|threads|use_churn_threads) env="NCCLMPI_AGREE=0 FAKE_CUDA_FREE_SYNC=1" ;;
    fault|fault_nb) env="NCCLMPI_FAULT=0:20 NCCLMPI_TIMEOUT=10" ;;
    esac
    env $env ${HAZARD_ENV:-} TMPDIR="$d" timeout -k 5 120 "$b/test/run_mpi.sh" $np preload "$prog" $sc >"$d/out" 2>"$d/err"
    rc=$?
    # (a communicator whose NCCL side could not be made runs staged: right results, but not the
    # route this suite is about)
    if [ $rc = 0 ] && grep -q "gpu_hazard $sc: OK" "$d/out" && ! grep -q "gpu_hazard $sc: FAIL" "$d/out" &&
       ! grep -qE "connecting the ranks failed|ncclCommInitRank failed|failed: stand-in NCCL error" "$d/err"; then
      echo "hazard: $sc, $np ranks: ok"
    else
      echo "hazard: FAIL: $sc, $np ranks (exit $rc$([ $rc = 124 ] && echo ': timed out, a hang'))"
      head -20 "$d/out"; tail -20 "$d/err"
      fail=1
    fi
  done
done
# a rank killed in a collective loop: the survivors' calls end in errors (NCCLMPI_TIMEOUT)
for np in 2 3; do
  if NM_HAZARD_PROG="$prog" TMPDIR="$d" sh "$(dirname "$0")/../gpu/gpu_hazard_kill.sh" "$b" $np >"$d/out" 2>&1; then
    echo "hazard: kill, $np ranks: ok ($(grep -c 'got its error' "$d/out") survivors reported the error)"
  else
    echo "hazard: FAIL: kill, $np ranks"; tail -20 "$d/out"; fail=1
  fi
done
exit $fail
