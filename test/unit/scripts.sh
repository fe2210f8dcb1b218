#!/bin/sh
# scripts.sh BUILDDIR SRCDIR: ncclmpi_exec, tools/quickstart.sh, tools/gpu_check.sh, gpu_wheels.sh and the
# overhead benchmarks answer --help, and a wrong option or command with usage and status 2,
# before doing anything (quickstart builds nothing);
# ncclmpi_exec preloads the library (NCCLMPI_LIB) and says so when it is missing; test/run_mpi.sh
# gives each rank an NCCL_HOSTID of its own when asked.
b=$1; s=$2
exe="$b/tools/ncclmpi_exec"
out="$b/scripts_test.out"; err="$b/scripts_test.err"
fail() { echo "scripts: FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }

"$exe" --help >"$out" 2>"$err" || fail "ncclmpi_exec --help"
grep -q '^usage: ncclmpi_exec' "$out" && grep -q NCCLMPI_LIB "$out" || fail "ncclmpi_exec --help: no usage"
"$exe" -h >"$out" 2>"$err" || fail "ncclmpi_exec -h"
"$exe" --version >"$out" 2>"$err" || fail "ncclmpi_exec --version"
grep -Eq 'ncclmpi [0-9]+\.[0-9]+' "$out" || fail "ncclmpi_exec --version"
"$exe" >"$out" 2>"$err"; [ $? = 2 ] || fail "ncclmpi_exec without a program: status is not 2"
grep -q '^usage:' "$err" || fail "ncclmpi_exec without a program: no usage"
"$exe" --hlep >"$out" 2>"$err"; [ $? = 2 ] || fail "ncclmpi_exec --hlep: status is not 2"
grep -q "unknown option '--hlep'" "$err" && grep -q '^usage:' "$err" || fail "ncclmpi_exec --hlep: no usage"
NCCLMPI_LIB=/nonexistent/libncclmpi.so "$exe" true >"$out" 2>"$err"; [ $? = 127 ] || fail "missing library: status is not 127"
grep -q 'NCCLMPI_LIB' "$err" || fail "missing library: no hint"
NCCLMPI_LIB="$b/.libs/libncclmpi.so" LD_PRELOAD= "$exe" -- sh -c 'echo "$LD_PRELOAD"' >"$out" 2>"$err" || fail "ncclmpi_exec -- sh"
grep -qx "$b/.libs/libncclmpi.so" "$out" || fail "ncclmpi_exec does not preload NCCLMPI_LIB"

q="$s/tools/quickstart.sh"
for a in --help -h help; do
  bash "$q" $a >"$out" 2>"$err" || fail "quickstart.sh $a"
  grep -q '^usage: tools/quickstart.sh' "$out" && grep -q NCCLMPI_CONFIGURE_FLAGS "$out" || fail "quickstart.sh $a: no usage"
done
# a typo stops before anything is installed or built: it would print "quickstart: installing" or
# run configure/make (minutes), not exit 2 at once
bash "$q" tset >"$out" 2>"$err"; [ $? = 2 ] || fail "quickstart.sh tset: status is not 2"
grep -q "unknown command 'tset'" "$err" && grep -q '^usage:' "$err" || fail "quickstart.sh tset: no usage"
grep -q 'installing' "$out" "$err" && fail "quickstart.sh tset installs"
bash "$q" demo extra >"$out" 2>"$err"; [ $? = 2 ] || fail "quickstart.sh demo extra: status is not 2"
# the GPU check and the overhead benchmarks: --help prints their header and does nothing else
for sc in tools/gpu_check.sh:Usage tools/gpu_wheels.sh:gpu_wheels.sh bench/host_overhead.sh:host_overhead.sh bench/device_overhead.sh:device_overhead.sh; do
  f=${sc%%:*}; word=${sc#*:}
  bash "$s/$f" --help >"$out" 2>"$err" || fail "$f --help: status"
  grep -q "$word" "$out" && [ ! -s "$err" ] || fail "$f --help: no usage"
done
bash "$s/tools/gpu_wheels.sh" >"$out" 2>"$err"; [ $? = 2 ] || fail "gpu_wheels.sh without a folder: status is not 2"
# test/run_mpi.sh NM_TEST_HOSTID_PER_RANK=1: an NCCL_HOSTID per rank, leading mpiexec options
# (--mca NAME VALUE, flags) left to mpiexec, the program's own arguments untouched
NM_TEST_HOSTID_PER_RANK=1 "$b/test/run_mpi.sh" 2 plain --mca btl self,vader --tag-output sh -c 'echo "id=$NCCL_HOSTID $0 $1"' x --y \
  >"$out" 2>"$err" || fail "run_mpi.sh with NM_TEST_HOSTID_PER_RANK=1"
grep -q "id=ncclmpi-test-rank-0 x --y" "$out" && grep -q "id=ncclmpi-test-rank-1 x --y" "$out" || fail "run_mpi.sh: no host id per rank"
echo "scripts: ok"
