#!/bin/sh
# info.sh BUILDDIR: ncclmpi_info answers --help and --version, refuses a wrong option with status
# 2, prints every report (-c the build configuration as ompi_info's -c, -s the settings; also
# colon-separated with --parsable, without test-only variables), probes without a CUDA driver and with
# a stand-in one (test/unit/fake_cuda.c: three GPUs, NVLink, PCIe and no peer access), says for
# which NCCL versions MAX and MIN reductions go to NCCL apart (the stand-in NCCL), links
# neither libcuda nor libnccl, and warns about invalid and unknown NCCLMPI_* variables.
b=$1
info="$b/tools/ncclmpi_info"
fake="$b/test/unit/.libs/libfakecuda.so"
out="$b/info_test.out"; err="$b/info_test.err"
fail() { echo "info: FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
# a clean environment: no NCCLMPI_* of the caller
for v in $(env | sed -n 's/^\(NCCLMPI_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

"$info" --help >"$out" 2>"$err" || fail "--help exit status"
grep -q '^usage: ncclmpi_info' "$out" || fail "--help prints no usage"
for o in --config --build --probe --settings --all --parsable --version; do grep -q -- "$o" "$out" || fail "--help does not name $o"; done
"$info" --version >"$out" 2>"$err" || fail "--version exit status"
grep -Eq '^ncclmpi [0-9]+\.[0-9]+\.[0-9]+' "$out" || fail "--version"
"$info" -x >"$out" 2>"$err"; [ $? = 2 ] || fail "-x: exit status is not 2"
grep -q -- "--help" "$err" || fail "-x: no hint"
"$info" extra >"$out" 2>"$err"; [ $? = 2 ] || fail "a stray argument: exit status is not 2"

"$info" >"$out" 2>"$err" || fail "no option"
grep -q 'CUDA headers' "$out" && grep -q 'hwloc headers *: [0-9]' "$out" && grep -q 'MPI (mpi.h)' "$out" || fail "build facts"
"$info" -c >"$out" 2>"$err" || fail "-c"
grep -q '^Build' "$out" && grep -q 'CUDA headers' "$out" || fail "-c is not the build configuration (as ompi_info -c)"
grep -q '^Settings' "$out" && fail "-c prints the settings"
"$info" -a >"$out" 2>"$err" || fail "-a"
for s in Build 'Intercepted MPI functions' 'Run-time probe' Settings; do grep -q "^$s" "$out" || fail "-a has no $s section"; done
[ -s "$err" ] && fail "-a writes to stderr"
grep -q NCCLMPI_TEST_EXPECT "$out" && fail "-a prints the test-only NCCLMPI_TEST_EXPECT"

# --parsable: colon-separated lines as ompi_info's (key parts, then the value), no dots in keys
"$info" -a --parsable >"$out" 2>"$err" || fail "-a --parsable"
bad=$(grep -Ev '^[A-Za-z0-9_]+:' "$out" | head -3)
[ -z "$bad" ] || fail "--parsable lines that are not key:value: $bad"
for k in version build:prefix build:libdir build:configure_args build:mpi build:cuda:headers build:nccl:headers \
         build:hwloc:headers functions:count probe:mpi:library probe:cuda:driver probe:gpu:count setting:NCCLMPI_LOG:value; do
  grep -q "^$k:" "$out" || fail "--parsable has no $k"
done
grep -Eq '^[a-z]+\.[a-z]' "$out" && fail "--parsable keys with dots: $(grep -E '^[a-z]+\.[a-z]' "$out" | head -2)"
grep -q NCCLMPI_TEST_EXPECT "$out" && fail "-a --parsable prints the test-only NCCLMPI_TEST_EXPECT"
# (keys of values without a colon: split at the last one)
dups=$(grep -v '^probe:mpi:library:' "$out" | sed 's/:[^:]*$//' | sort | uniq -d | head -3)
[ -z "$dups" ] || fail "--parsable repeats keys: $dups"

# no driver
NCCLMPI_CUDA_LIB=/nonexistent/libcuda.so.1 "$info" -p --parsable >"$out" 2>"$err" || fail "-p without a driver"
grep -q '^probe:cuda:driver:none$' "$out" && grep -q '^probe:gpu:count:0$' "$out" || fail "-p without a driver"
NCCLMPI_CUDA_LIB=/nonexistent/libcuda.so.1 "$info" -p >"$out" 2>"$err" || fail "-p without a driver"
grep -q 'no CUDA driver' "$out" || fail "-p does not say 'no CUDA driver'"
NCCLMPI_NCCL_LIB=/nonexistent/libnccl.so.2 "$info" -p --parsable >"$out" 2>"$err" || fail "-p without NCCL"
grep -q '^probe:nccl:lib:none$' "$out" || fail "-p without NCCL"

# a stand-in driver with three GPUs
if [ -e "$fake" ]; then
  NCCLMPI_CUDA_LIB="$fake" "$info" -p --parsable >"$out" 2>"$err" || fail "-p with the stand-in driver"
  for kv in probe:cuda:version:12.4 probe:gpu:count:3 'probe:gpu:1:name:Fake GPU 1' \
            probe:gpu:2:uuid:GPU-12121212-1212-1212-1212-121212121212 probe:gpu:0:pci_bus_id:0000:81:00.0 \
            probe:gpu:0:compute_capability:9.0 probe:p2p:0:1:link:nvlink probe:p2p:1:0:link:nvlink \
            probe:p2p:0:2:link:pcie probe:p2p:1:2:link:none probe:p2p:0:1:perf_rank:0 probe:gpu:0:mps:0; do
    grep -qx "$kv" "$out" || fail "stand-in driver: no line $kv"
  done
  grep -q '^probe:gpu:0:numa_node:' "$out" && grep -q '^probe:gpu:0:cpuset:' "$out" || fail "stand-in driver: no NUMA/CPUs"
  NCCLMPI_CUDA_LIB="$fake" "$info" -p >"$out" 2>"$err" || fail "-p with the stand-in driver"
  grep -q 'NV(0)' "$out" && grep -q 'PCI(1)' "$out" && grep -q 'GPU2' "$out" || fail "stand-in driver: no peer matrix"
else
  echo "info: $fake not built; the stand-in driver checks are left out"
fi

# the stand-in NCCL: MAX and MIN apart for the versions that mix them up (route.h), not for others
fnccl="$b/test/unit/.libs/libfakenccl.so"
if [ -e "$fnccl" ]; then
  for vk in 22803:yes 21901:yes 22902:no 21803:no; do
    FAKE_NCCL_VERSION=${vk%:*} NCCLMPI_NCCL_LIB="$fnccl" "$info" -p --parsable >"$out" 2>"$err" || fail "-p with the stand-in NCCL"
    grep -qx "probe:nccl:minmax_apart:${vk#*:}" "$out" || fail "stand-in NCCL ${vk%:*}: no line probe:nccl:minmax_apart:${vk#*:}"
  done
  FAKE_NCCL_VERSION=22803 NCCLMPI_NCCL_LIB="$fnccl" "$info" -p >"$out" 2>"$err" || fail "-p with the stand-in NCCL"
  grep -q 'MAX and MIN *: never in one NCCL group' "$out" || fail "stand-in NCCL 2.28.3: no 'MAX and MIN' line"
fi

# nothing links the CUDA driver or NCCL
if command -v readelf >/dev/null 2>&1; then
  readelf -d "$info" | grep -Ei 'NEEDED.*(libcuda|libnccl)' && fail "ncclmpi_info links libcuda or libnccl"
fi

# settings: invalid values and unknown names warn, script variables do not, NCCLMPI_LOG=ERROR silences
NCCLMPI_TIMEOUT=-1 NCCLMPI_MANAGED=gpu NCCLMPI_STAT=1 NCCLMPI_LIB=/x.so NCCLMPI_CONFIGURE_FLAGS=--x NCCLMPI_TEST_EXPECT=1 "$info" -s >"$out" 2>"$err" ||
  fail "-s with bad settings"
grep -q 'NCCLMPI_TIMEOUT="-1" is not valid; using the default "0". Accepted: an integer >= 0' "$err" || fail "TIMEOUT=-1 warning"
grep -q 'NCCLMPI_MANAGED="gpu" is not valid.*device, host' "$err" || fail "MANAGED=gpu warning"
grep -q 'NCCLMPI_STAT is not an ncclmpi setting.*did you mean NCCLMPI_STATS' "$err" || fail "unknown NCCLMPI_STAT warning"
grep -Eq 'NCCLMPI_(LIB|CONFIGURE_FLAGS)' "$err" && fail "a script variable is reported"
[ "$(grep -c WARN "$err")" = 3 ] || fail "not exactly three warnings"
grep -q 'NCCLMPI_LIB (ncclmpi_exec, default "LIBDIR/libncclmpi.so", current "/x.so"' "$out" || fail "-s: script variables"
grep -q NCCLMPI_TEST_EXPECT "$out" && fail "-s lists the test-only NCCLMPI_TEST_EXPECT"
NCCLMPI_LOG=error NCCLMPI_STAT=1 "$info" -s >"$out" 2>"$err" || fail "-s with LOG=error"
[ -s "$err" ] && fail "NCCLMPI_LOG=error does not silence the warnings"
echo "info: ok"
