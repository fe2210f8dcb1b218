#!/bin/bash
# tools/gpu_check.sh: the GPU job, one call on the device machine (see doc/gpu-testing.md).
# Builds ncclmpi from the dist tarball in .dist/ (made here with `make dist`; the GPU machine
# has no libtool), runs the unit, mpi and gpu CTest labels, then the benchmarks.
# Logs go to $OUT (the device tool brings them back).
# Usage: tools/gpu_check.sh [full|quick|tests|multi]   (tests: gpu label only, no benchmarks;
#        multi: gpu label, then coll_bench at one rank per GPU)
set -u
OUT=${OUT:-/tmp/nm-out}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mode=${1:-full}
ngpu=$(nvidia-smi -L | wc -l)
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/machine.txt" 2>&1
repo=$PWD
tarball=$(ls "$PWD"/.dist/ncclmpi-*.tar.gz | head -1)
rm -rf /tmp/nm && mkdir -p /tmp/nm && tar -C /tmp/nm -xzf "$tarball" && cd /tmp/nm/ncclmpi-*/ || exit 1
src=$PWD
mkdir -p build && cd build
if ! CC=mpicc CXX=mpicxx ../configure --without-fortran > "$OUT/build.log" 2>&1; then tail -40 "$OUT/build.log"; exit 1; fi
if ! make -j16 >> "$OUT/build.log" 2>&1; then tail -60 "$OUT/build.log"; exit 1; fi
make -j16 check TESTS= CTEST=true >> "$OUT/build.log" 2>&1   # build the test programs only
make -j16 bench >> "$OUT/build.log" 2>&1 || tail -30 "$OUT/build.log"
echo "== build ok: $(grep -m1 'NCCL ' "$OUT/build.log")"

labels="unit|gpu"
[ "$mode" = full ] && labels="unit|mpi|gpu"
[ "$mode" = tests ] && labels="gpu"
[ "$mode" = multi ] && labels="gpu"
timeout 420 ctest -L "$labels" --output-on-failure -j1 > "$OUT/ctest.log" 2>&1
echo "== ctest ($labels): $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
grep -E "^ *[0-9]+/[0-9]+ Test.*(Failed|Timeout|Skipped|Not Run)|gpu_coll:|gpu_misc:|gpu_stream:" "$OUT/ctest.log" | head -40

lib=$PWD/.libs/libncclmpi.so
# Fortran device tests: built on the development machine (no gfortran here) and carried in .dist/
if ls "$repo"/.dist/fortran/f_device_* >/dev/null 2>&1; then
  for prog in "$repo"/.dist/fortran/f_device_*; do
    for np in 1 2; do
      echo "== $(basename "$prog") np=$np: $(timeout 120 test/run_mpi.sh $np preload "$prog" 2>&1 | grep -E 'f_device|FAIL' | tr '\n' ' ')"
    done
  done | tee -a "$OUT/ctest.log"
fi
[ "$mode" = tests ] && exit 0  # tests only, no benchmarks
if [ "$mode" = multi ]; then  # several GPUs, short lease: the benchmark at one rank per GPU only
  timeout 200 mpirun --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_PRELOAD=$PWD/.libs/libncclmpi.so \
    -np "$ngpu" ./bench/coll_bench -b 8 -e 256M -f 4 -o "$OUT/bench_np$ngpu.csv" 2>&1 | tee "$OUT/bench.txt"
  exit 0
fi
{
  echo "== classify cost (1 rank): without / with libncclmpi"
  ./bench/classify_cost 1000000
  LD_PRELOAD=$lib ./bench/classify_cost 1000000
} > "$OUT/bench.txt" 2>&1
run="mpirun --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x LD_PRELOAD=$lib"
for np in 1 $([ "$ngpu" -ge 2 ] && echo 2) $([ "$ngpu" -ge 4 ] && echo 4); do
  emax=1G; [ "$mode" = full ] || emax=64M
  echo "== coll_bench np=$np" >> "$OUT/bench.txt"
  timeout 300 $run -np $np ./bench/coll_bench -b 8 -e $emax -f 4 -o "$OUT/bench_np$np.csv" >> "$OUT/bench.txt" 2>&1
done
echo "== coll_bench np=1, NCCLMPI_CALC_STREAM=0 (blocking calls on the comm stream, event-ordered)" >> "$OUT/bench.txt"
NCCLMPI_CALC_STREAM=0 timeout 120 $run -x NCCLMPI_CALC_STREAM -np 1 ./bench/coll_bench -b 8 -e 1M -f 16 -c allreduce,bcast -o /tmp/bench_noorder.csv >> "$OUT/bench.txt" 2>&1
echo "== coll_bench np=1, NCCLMPI_AGREE=1 (cost of route agreement)" >> "$OUT/bench.txt"
NCCLMPI_AGREE=1 timeout 120 $run -x NCCLMPI_AGREE -np 1 ./bench/coll_bench -b 8 -e 1M -f 16 -c allreduce -o /tmp/bench_agree.csv >> "$OUT/bench.txt" 2>&1
for np in 2 4 8; do timeout 60 mpirun --oversubscribe --bind-to none -np $np ./bench/agree_cost >> "$OUT/bench.txt" 2>&1; done
echo "== NCCL communicator creation: fresh init vs split from the parent (NCCLMPI_LOG=INFO)" >> "$OUT/bench.txt"
for split in 1 0; do
  NCCLMPI_SPLIT=$split NCCLMPI_LOG=INFO NCCLMPI_LOG_SUBSYS=INIT timeout 120 $run -x NCCLMPI_SPLIT -x NCCLMPI_LOG -x NCCLMPI_LOG_SUBSYS -np 1 ./test/gpu/gpu_misc 2>&1 | grep -E "ncclComm(InitRank|Split) in" | sed "s/^/SPLIT=$split: /" >> "$OUT/bench.txt"
done
python3 ./../bench/plot.py "$OUT/bench.png" "$OUT"/bench_np*.csv >> "$OUT/bench.txt" 2>&1 || true
cat "$OUT/bench.txt"
