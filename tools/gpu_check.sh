#!/bin/bash
# tools/gpu_check.sh: build ncclmpi on a GPU machine and run its GPU tests and benchmarks, logs
# to $OUT (default /tmp/nm-out). Builds from the dist tarball in .dist/ when there is one (a
# machine without libtool: make it with `make dist` where autotools are complete), else from the
# source tree with ./configure.
# Usage: tools/gpu_check.sh [full|quick|tests|bench|hazard|sanitize]
#   tests   gpu label (every GPU test, the hazard suite included)
#   sanitize  compute-sanitizer memcheck over every GPU test program at 2 ranks (some at 3) and
#             every hazard scenario but the injected failures, racecheck and synccheck over the
#             one-shot kernels (NM_SANITIZE_TESTS="NP [VAR=VALUE] PROG ARGS;...",
#             NM_SANITIZE_TOOLS to choose; gpu_coll --only NAME --trace narrows a report to a case)
#   hazard  the hazard suite only
#   connect NCCL's connections at creation (NCCLMPI_CONNECT), one rank per GPU: gpu_hazard
#           connect_crossing and cyclic_comms with init (the default) and all must pass; with lazy,
#           connect_crossing is expected to hang (60 s limit): real NCCL connecting at first use;
#           comm_bench without the cache (a creation per use) with init, all and lazy
#   p2p     the point-to-point tests (NCCLMPI_P2P_ENVELOPE=device included) and p2p_bench with
#           envelopes off and on (NM_P2P_BENCH_ARGS adds arguments)
#   bench   engine_bench (with and without coalescing, fused and not), comm_bench (NCCLMPI_COMM_CACHE 0 and 2),
#           coll_bench, p2p_bench, stream_bench, io_bench, rma_bench and classify_cost at one rank
#           per GPU, timeslice_bench at two ranks per GPU
#   virtual the gpu label with an NCCL_HOSTID per rank (NM_TEST_HOSTID_PER_RANK=1), under MPS
#           where nvidia-cuda-mps-control exists: NCCL takes the ranks of one GPU as hosts of
#           their own, joined by its socket transport over loopback, so a one-GPU machine runs the
#           multi-rank NCCL route (correctness and hangs; its speed means nothing), with NCCL's
#           own choice of algorithm (NCCL_ALGO if set). First raw NCCL alone
#           (test/gpu/nccl_group_check) at 2-4 ranks: max and min allreduces in one group, which
#           NCCL 2.19-2.28 get wrong at 3+ ranks on a tree (ncclmpi never groups them: route.h),
#           the same one by one, and sum with max in one group
#   mpi4py  mpi4py's own test suite (`test/main.py --cupy`) under the preloaded library, in the
#           one-GPU NCCL arrangement (an NCCL_HOSTID per rank, MPS) and with ranks sharing the GPU,
#           at 1-3 ranks; its tests are not ours: NM_MPI4PY_TESTS names the folder holding
#           mpi4py's test/ (default .scratch/mpi4py/test, from the mpi4py sdist of the version the
#           machine's Python has; tools/mpi4py_tests.sh fetches it). NM_MPI4PY_NP (default
#           "1 2 3"), NM_MPI4PY_MODES ("virtual shared"), NM_MPI4PY_ARGS (more main.py arguments,
#           e.g. "-i test_cco_buf"), NM_MPI4PY_LIMIT (seconds a run, default 400); a run without
#           the library (NM_MPI4PY_PLAIN=1) tells which failures are the suite's own. The suite's
#           CuPy arrays fill as NumPy's do (a copy, patched: CuPy 14 refuses -1 for an unsigned
#           type, and a test that fills only at its root then calls different collectives on
#           different ranks); NM_MPI4PY_CUPY_FIX=0 runs it as shipped
#   quick   tests, then the benchmarks up to 64 MiB; full: unit|mpi|gpu labels, benchmarks to 1 GiB
# NM_REUSE_BUILD=1: use the build an earlier call made on this machine (chained calls);
# NM_CTEST_JOBS=N: run N tests at once (default 1: the failure-injection tests time their exits);
# NM_CTEST_ARGS: more ctest arguments (-R/-E to split the label over chained calls)
set -u
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
OUT=${OUT:-/tmp/nm-out}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mode=${1:-full}
ngpu=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/machine.txt" 2>&1
repo=$PWD
if [ -n "${NM_REUSE_BUILD:-}" ] && [ -f /tmp/nm/build.done ]; then  # the previous call's build (same machine)
  cd "$(cat /tmp/nm/build.done)" || exit 1
  echo "== reusing the build in $PWD"
else
if ls "$repo"/.dist/ncclmpi-*.tar.gz >/dev/null 2>&1; then
  rm -rf /tmp/nm && mkdir -p /tmp/nm && tar -C /tmp/nm -xzf "$(ls "$repo"/.dist/ncclmpi-*.tar.gz | head -1)" &&
    cd /tmp/nm/ncclmpi-*/ || exit 1
fi
mkdir -p build && cd build
if ! CC=mpicc CXX=mpicxx ../configure --without-fortran > "$OUT/build.log" 2>&1; then tail -40 "$OUT/build.log"; exit 1; fi
if ! make -j"$(nproc)" >> "$OUT/build.log" 2>&1; then tail -60 "$OUT/build.log"; exit 1; fi
make -j"$(nproc)" check TESTS= CTEST=true >> "$OUT/build.log" 2>&1   # build the test programs only
make -j"$(nproc)" bench >> "$OUT/build.log" 2>&1 || tail -30 "$OUT/build.log"
echo "== build ok: $(grep -m1 'NCCL ' "$OUT/build.log"); $(grep -m1 'kernels ' "$OUT/build.log")"
mkdir -p /tmp/nm && echo "$PWD" > /tmp/nm/build.done
fi

lib=$PWD/.libs/libncclmpi.so
./tools/ncclmpi_info -a > "$OUT/info.txt" 2>&1
run="mpirun --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_PRELOAD=$lib"
ctest_run() {  # label regex, time limit
  timeout "$2" ctest -L "$1" ${NM_CTEST_ARGS:-} --output-on-failure -j"${NM_CTEST_JOBS:-1}" --timeout 180 > "$OUT/ctest.log" 2>&1
  echo "== ctest ($1): $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
  grep -E "^ *[0-9]+/[0-9]+ Test.*(Failed|Timeout|Not Run|\*\*\*)" "$OUT/ctest.log" | head -40
  grep -E "Total Test time" "$OUT/ctest.log"
  cp Testing/Temporary/LastTest.log "$OUT/" 2>/dev/null  # every test's whole output
}
case "$mode" in
hazard) ctest_run gpu "${NM_CTEST_LIMIT:-480}" ;;  # the label includes the hazard suite
connect)
  np=$ngpu
  for c in init all lazy; do
    for sc in connect_crossing cyclic_comms; do
      [ $sc = cyclic_comms ] && [ "$np" -lt 3 ] && continue
      lim=120; [ $c = lazy ] && lim=60
      NCCLMPI_CONNECT=$c timeout $lim $run -x NCCLMPI_CONNECT -np "$np" ./test/gpu/gpu_hazard $sc > "$OUT/connect_${c}_$sc.txt" 2>&1
      echo "== NCCLMPI_CONNECT=$c gpu_hazard $sc np=$np: exit $? $(grep -E "gpu_hazard $sc: (OK|FAIL)" "$OUT/connect_${c}_$sc.txt" | head -1)"
    done
    echo "== comm_bench np=$np, NCCLMPI_CONNECT=$c, NCCLMPI_COMM_CACHE=0 (a creation per use)"
    NCCLMPI_CONNECT=$c NCCLMPI_COMM_CACHE=0 timeout 200 $run -x NCCLMPI_CONNECT -x NCCLMPI_COMM_CACHE -np "$np" ./bench/comm_bench -r 3 \
      -o "$OUT/comm_np${np}_connect_$c.csv" 2>&1 | tail -6
  done
  exit 0 ;;
p2p)
  [ "${NM_P2P_TESTS:-1}" = 0 ] || timeout "${NM_CTEST_LIMIT:-300}" ctest -L gpu -R "gpu_(p2p|persist|neighbor|hazard_envelope)" --output-on-failure -j1 --timeout 120 > "$OUT/ctest.log" 2>&1
  echo "== ctest (p2p): $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
  grep -E "^ *[0-9]+/[0-9]+ Test.*(Failed|Timeout|Not Run|\*\*\*)" "$OUT/ctest.log" | head -40
  cp Testing/Temporary/LastTest.log "$OUT/" 2>/dev/null
  for env in off device; do
    echo "== p2p_bench np=$ngpu NCCLMPI_P2P_ENVELOPE=$env"
    NCCLMPI_P2P_ENVELOPE=$env timeout 200 $run -x NCCLMPI_P2P_ENVELOPE -np "$ngpu" ./bench/p2p_bench -b 8 -e 32M -f 4 \
      ${NM_P2P_BENCH_ARGS:-} -o "$OUT/p2p_np${ngpu}_$env.csv" 2>&1 | tee "$OUT/p2p_np${ngpu}_$env.txt"
  done
  exit 0 ;;
tests) ctest_run gpu "${NM_CTEST_LIMIT:-480}" ;;
virtual)
  export NM_TEST_HOSTID_PER_RANK=1 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_NET=${NCCL_NET:-Socket}
  mps=""
  if command -v nvidia-cuda-mps-control >/dev/null && [ "${NM_MPS:-1}" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/nm-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/nm-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && mps=1
  fi
  echo "== virtual: NCCL_HOSTID per rank, MPS ${mps:-off}"
  raw() { timeout 120 test/run_mpi.sh "$1" plain ./test/gpu/nccl_group_check 3 "${@:2}" 2>&1 | grep -E '^nccl_group_check: (round|[0-9])' | tail -2 | tr '\n' ' '; }
  for np in 2 3 4; do  # NCCL itself here, with the run's algorithms (NCCL's choice unless NCCL_ALGO is set)
    echo "== raw NCCL, $np ranks, max and min in one group: $(raw $np --ops max,min)"
    echo "== raw NCCL, $np ranks, max and min one by one: $(raw $np --ops max,min --nogroup)"
    echo "== raw NCCL, $np ranks, sum and max in one group: $(raw $np --ops sum,max)"
  done
  ctest_run gpu "${NM_CTEST_LIMIT:-480}"
  [ -n "$mps" ] && echo quit | nvidia-cuda-mps-control
  exit 0 ;;
mpi4py)
  tdir=${NM_MPI4PY_TESTS:-$repo/.scratch/mpi4py/test} bdir=$PWD
  [ -f "$tdir/main.py" ] || { echo "== mpi4py: no suite in $tdir (tools/mpi4py_tests.sh)"; exit 1; }
  if [ "${NM_MPI4PY_CUPY_FIX:-1}" = 1 ]; then
    # mpi4py 4.1.2's CuPy arrays (arrayimpl.py) fill with a Python int as it is, which CuPy 14
    # refuses for an unsigned type (-1: OverflowError) where NumPy's arrays first cast it
    # (numpy.asarray(arg).astype(typecode)); a test that fills only at its root then makes the
    # ranks call different collectives. The copy here casts as NumPy's arrays do.
    cdir=$(mktemp -d /tmp/nm-mpi4py-tests.XXXXXX) && cp -r "$tdir/." "$cdir" && tdir=$cdir  # (one per run: runs may overlap)
    python3 - "$tdir/arrayimpl.py" <<'PYEOF' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index("self.array = cupy.zeros(shape, typecode)")
head, tail = s[:i], s[i:]
for a, b in (("self.array.fill(arg)", "self.array.fill(numpy.asarray(arg).astype(typecode))"),
             ("cupy.asarray(arg, typecode)", "cupy.asarray(numpy.asarray(arg).astype(typecode))")):
    assert a in tail, a
    tail = tail.replace(a, b, 1)
open(p, "w").write(head + tail)
print("== mpi4py: CuPy arrays cast their fill values as NumPy's do (NM_MPI4PY_CUPY_FIX=0: as shipped)")
PYEOF
  fi
  py=$(command -v python3)
  for m in ${NM_MPI4PY_MODES:-virtual shared}; do
    mps=""
    if [ "$m" = virtual ]; then
      export NM_TEST_HOSTID_PER_RANK=1 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_NET=${NCCL_NET:-Socket}
      if command -v nvidia-cuda-mps-control >/dev/null; then
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/nm-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/nm-mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        nvidia-cuda-mps-control -d && mps=1
      fi
    else
      unset NM_TEST_HOSTID_PER_RANK
    fi
    for np in ${NM_MPI4PY_NP:-1 2 3}; do
      for how in preload ${NM_MPI4PY_PLAIN:+plain}; do
        log="$OUT/mpi4py_${m}_np${np}_$how.log"
        ( cd "$tdir" && PYTHONUNBUFFERED=1 NCCLMPI_TIMEOUT=${NCCLMPI_TIMEOUT:-60} timeout -k 10 "${NM_MPI4PY_LIMIT:-400}" \
            "$bdir/test/run_mpi.sh" "$np" "$how" "$py" main.py --cupy ${NM_MPI4PY_ARGS:-} ) > "$log" 2>&1
        rc=$?
        echo "== mpi4py $m np=$np $how: exit $rc$([ $rc = 124 ] && echo ' (timed out)'); $(grep -E '^(Ran|OK|FAILED)' "$log" | sort | uniq -c | tr '\n' ' ')"
        grep -hE '^(ERROR|FAIL):' "$log" | sort | uniq -c | sort -rn | head -${NM_MPI4PY_SHOW:-25}
      done
    done
    [ -n "$mps" ] && echo quit | nvidia-cuda-mps-control
  done
  exit 0 ;;
full) ctest_run "unit|mpi|gpu" "${NM_CTEST_LIMIT:-520}" ;;
quick) ctest_run gpu "${NM_CTEST_LIMIT:-400}" ;;
sanitize)
  # NCCL probes kernels it has no image for (API errors that are not ours: not reported), and
  # its cuMem-mapped peer buffers are invisible to memcheck (NCCL_CUMEM_ENABLE=0: CUDA IPC)
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  export NCCL_CUMEM_ENABLE=0
  # every program of the gpu label at 2 ranks (some at 3), every hazard scenario but the injected
  # failures; an entry is "NP [VAR=VALUE ...] PROGRAM [ARGS]"
  hz=""
  for sc in layout_gather layout_bcast layout_reduce empty_gatherv_first empty_alltoallv_first empty_scatterv \
            bottom signature_pipelined threads first_nb_crossing comm_free_outstanding dup_churn progress \
            coalesce_triggers explicit_group field_range group_mix fuzz; do hz="$hz;2 gpu_hazard $sc"; done
  list=${NM_SANITIZE_TESTS:-"2 gpu_coll --only Alltoall --trace;2 gpu_coll --quick;3 gpu_coll --quick;2 gpu_oneshot --quick;2 gpu_misc;2 gpu_stream;2 gpu_reject;2 gpu_p2p --seed 1;3 gpu_p2p --seed 2;2 gpu_persist --iters 100;2 gpu_neighbor;3 gpu_neighbor;3 gpu_hazard layout_bcast;3 gpu_hazard threads;2 NCCLMPI_AGREE=1 gpu_hazard agree_mixed;2 NCCLMPI_AGREE=1 gpu_hazard uint8_sum;2 NCCLMPI_P2P_ENVELOPE=device NCCLMPI_P2P_ENVELOPE_MIN=4096 gpu_p2p --seed 32$hz"}
  mc_one() {  # one entry of the list, its report appended to log $2
    local t=$1 log=$2 np envs prog
    set -f; set -- $t; set +f; np=$1; shift
    envs=""
    while [ $# -gt 0 ] && [ "${1#*=}" != "$1" ]; do envs="$envs $1"; shift; done
    prog=$1; shift
    echo "== memcheck np=$np$envs $prog $*" >> "$log"
    env $envs timeout "${NM_SANITIZE_LIMIT:-240}" test/run_mpi.sh "$np" preload "$cs" --tool memcheck --report-api-errors no --target-processes all --error-exitcode 9 \
      --print-limit 20 "test/gpu/$prog" "$@" >> "$log" 2>&1
    local rc=$?
    echo "== memcheck np=$np$envs $prog $*: exit $rc (error summaries: $(grep -h 'ERROR SUMMARY' "$log" | tail -${np} | sed 's/.*SUMMARY: //' | tr '\n' ' '))"
  }
  # NM_SANITIZE_JOBS lists at once (the machine has cores to spare; memcheck is CPU-bound)
  jobs=${NM_SANITIZE_JOBS:-6}
  declare -a shard
  i=0
  IFS=';'; for t in $list; do shard[$((i % jobs))]+="$t;"; i=$((i + 1)); done; IFS=' '
  for ((j = 0; j < jobs; j++)); do
    ( IFS=';'; for t in ${shard[$j]:-}; do IFS=' '; mc_one "$t" "$OUT/sanitize.$j.log"; IFS=';'; done ) &
  done
  {
    # ncclmpi's own kernels (the one-shot path): shared-memory races and barrier misuse
    for tool in ${NM_SANITIZE_TOOLS:-racecheck synccheck}; do
      echo "== $tool np=2 gpu_oneshot --quick" >> "$OUT/sanitize.k.log"
      timeout "${NM_SANITIZE_LIMIT:-150}" test/run_mpi.sh 2 preload "$cs" --tool "$tool" --target-processes all --error-exitcode 9 \
        --print-limit 20 --kernel-name kns=nm_os_ test/gpu/gpu_oneshot --quick >> "$OUT/sanitize.k.log" 2>&1
      echo "== $tool np=2 gpu_oneshot --quick: exit $?"
    done
    # the control: raw NCCL alone (no ncclmpi) under the same memcheck, to tell NCCL's own reports
    echo "== memcheck control: raw NCCL alltoall and allreduce, no ncclmpi" >> "$OUT/sanitize.k.log"
    timeout "${NM_SANITIZE_LIMIT:-150}" test/run_mpi.sh 2 plain "$cs" --tool memcheck --report-api-errors no \
      --target-processes all --print-limit 20 bench/coll_bench -r 1 -c alltoall,allreduce -b 8 -e 1M -f 64 \
      -o "$OUT/control.csv" >> "$OUT/sanitize.k.log" 2>&1
    echo "== memcheck control (raw NCCL): exit $?"
  } &
  wait
  cat "$OUT"/sanitize.[0-9]*.log "$OUT/sanitize.k.log" > "$OUT/sanitize.log" 2>/dev/null
  grep -E "ERROR SUMMARY" "$OUT/sanitize.log" | sort | uniq -c
  exit 0 ;;
esac
# Fortran device tests: built where gfortran exists and carried in .dist/fortran
if [ "$mode" != hazard ] && [ "$mode" != bench ] && ls "$repo"/.dist/fortran/f_device_* >/dev/null 2>&1; then
  for prog in "$repo"/.dist/fortran/f_device_*; do
    for np in 1 2; do
      echo "== $(basename "$prog") np=$np: $(timeout 120 test/run_mpi.sh $np preload "$prog" 2>&1 | grep -E 'f_device|FAIL' | tr '\n' ' ')"
    done
  done | tee -a "$OUT/ctest.log"
fi
[ "$mode" = tests ] || [ "$mode" = hazard ] && exit 0
np=$ngpu
{
  echo "== engine_bench np=$np (64 x 4 KiB)"
  timeout 150 $run -np "$np" ./bench/engine_bench -k 64 -s 4096 -r 200 -o "$OUT/engine_np$np.csv" 2>&1
  echo "== engine_bench np=$np, NCCLMPI_COALESCE=0"
  NCCLMPI_COALESCE=0 timeout 100 $run -x NCCLMPI_COALESCE -np "$np" ./bench/engine_bench -k 64 -s 4096 -r 100 2>&1 | grep -E "Iallreduce|group_begin"
  # the coalesced groups' 64 allreduces in one NCCL call each (the default at 2 ranks or more, for
  # float sums at exactly 2) against 64 NCCL calls in the group, alternating, and at every size
  for f in all_1 off_1 all_2 off_2; do
    echo "== engine_bench np=$np, NCCLMPI_FUSE=${f%_*} (run ${f#*_})"
    NCCLMPI_FUSE=${f%_*} timeout 100 $run -x NCCLMPI_FUSE -np "$np" ./bench/engine_bench -k 64 -s 4096 -r 200 -o "$OUT/engine_np${np}_fuse_$f.csv" 2>&1 |
      grep -E "raw NCCL: 64 allreduce in one|Iallreduce x64|group_begin|breakdown"
  done
  for cache in 0 2; do
    echo "== comm_bench np=$np, NCCLMPI_COMM_CACHE=$cache (a communicator per use vs a kept one)"
    NCCLMPI_COMM_CACHE=$cache timeout 120 $run -x NCCLMPI_COMM_CACHE -np "$np" ./bench/comm_bench -o "$OUT/comm_np${np}_cache$cache.csv" 2>&1
  done
  echo "== coll_bench np=$np"
  emax=64M; [ "$mode" = full ] && emax=1G
  timeout 240 $run -np "$np" ./bench/coll_bench -b 8 -e $emax -f 4 -o "$OUT/bench_np$np.csv" 2>&1
  echo "== p2p_bench np=$np"
  timeout 150 $run -np "$np" ./bench/p2p_bench -b 8 -e 32M -f 4 -o "$OUT/p2p_np$np.csv" 2>&1
  echo "== stream_bench np=$np (MPIX_Allreduce_enqueue vs raw NCCL on the stream vs blocking MPI_Allreduce)"
  timeout 150 $run -np "$np" ./bench/stream_bench -b 8 -e 8M -f 16 -k 16 -r 200 -o "$OUT/stream_np$np.csv" 2>&1
  echo "== io_bench np=$np (MPI-IO of device buffers, files in /tmp)"
  timeout 150 $run -np "$np" ./bench/io_bench -b 1M -e 256M -f 4 -n 7 -d /tmp -o "$OUT/io_np$np.csv" 2>&1
  echo "== rma_bench np=$np (one-sided puts on device data: CUDA IPC vs copying by hand)"
  # (Open MPI's osc/ucx component cannot make windows on these machines: MPI_ERR_WIN, with or without ncclmpi)
  timeout 150 $run --mca osc ^ucx -np "$np" ./bench/rma_bench -b 8 -e 64M -f 8 -n 20 -o "$OUT/rma_np$np.csv" 2>&1
  echo "== timeslice_bench np=$((2 * np)) (two ranks per GPU: what sharing a GPU costs each operation)"
  timeout 100 mpirun --oversubscribe --bind-to none -np $((2 * np)) ./bench/timeslice_bench 200 2>&1
  echo "== classify cost (1 rank): without / with libncclmpi"
  ./bench/classify_cost 1000000
  LD_PRELOAD=$lib ./bench/classify_cost 1000000
  echo "== classify cost with NCCLMPI_HOST_RANGES=0 (every buffer asked of the driver)"
  NCCLMPI_HOST_RANGES=0 LD_PRELOAD=$lib ./bench/classify_cost 1000000
} > "$OUT/bench.txt" 2>&1
python3 "$repo/bench/plot.py" "$OUT/bench.png" "$OUT"/bench_np*.csv >> "$OUT/bench.txt" 2>&1 || true
{ echo "== the open performance targets (bench/targets.py)"
  python3 "$repo/bench/targets.py" "$OUT/engine_np$np.csv" "$OUT/bench_np$np.csv" "$OUT/p2p_np$np.csv"; } >> "$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt"
