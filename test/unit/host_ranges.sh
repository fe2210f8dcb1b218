#!/bin/sh
# host_ranges.sh BUILDDIR: once the CUDA driver is in the process, host buffers on the caller's
# stack, in static data and in the program break's range are known as host memory without a
# pointer query (NCCLMPI_HOST_RANGES); a large malloc (mapped memory) and device memory are asked
# about, also from a coroutine running on a stack of its own mapped below the device buffer (the
# range up to the thread's stack top then holds device memory); NCCLMPI_HOST_RANGES=0 asks about
# every buffer. One rank on the stand-in driver
# (test/unit/fake_cuda.c counts its queries; test/unit/host_ranges_prog.c), every result checked,
# the route of each call read from ncclmpi's counters.
b=$1
d="$b/host_ranges_test"
fail() { echo "host_ranges: FAIL: $*"; cat "$d/out"; tail -20 "$d/err"; exit 1; }
prog="$b/test/unit/host_ranges_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in host_ranges "$b" "$d" "$prog"
run() {  # [SETTING=VALUE]: one run into $d/out
  env "$@" "$b/test/run_mpi.sh" 1 preload "$prog" >"$d/out" 2>"$d/err" || fail "the run ($*) failed"
  grep -q "host_ranges_prog: ok" "$d/out" || fail "wrong results ($*)"
}
expect() {  # WHERE QUERIES ROUTE
  grep -q "^where=$1 queries_per_call=$2 route=$3\$" "$d/out" || fail "$1: expected $2 queries per call and the $3 route, got: $(grep "^where=$1 " "$d/out")"
}
run NCCLMPI_HOST_RANGES=1
expect stack 0.00 host
expect static 0.00 host
expect small_malloc 0.00 host
expect large_malloc 2.00 host
expect device 2.00 device
if grep -q "^where=device_coroutine skipped" "$d/out"; then
  echo "host_ranges: $(grep '^where=device_coroutine' "$d/out")"
else
  expect device_coroutine 2.00 device
fi
run NCCLMPI_HOST_RANGES=0
for w in stack static small_malloc large_malloc; do expect $w 2.00 host; done
expect device 2.00 device
echo "host_ranges: stack, static and small-malloc buffers classified without a driver query; large-malloc and device buffers asked"
