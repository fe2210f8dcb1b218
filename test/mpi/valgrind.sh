#!/bin/sh
# valgrind.sh BUILDDIR SRCDIR PROGRAM [ARGS...]: run a host-buffer test program at 2 ranks under
# valgrind memcheck, with libncclmpi and the CUDA toolkit's stub driver preloaded (so that every
# call goes through ncclmpi's classification and routing) and NCCLMPI_AGREE=1 (so that every
# collective also votes). Fails on any memcheck error outside the MPI's own internals
# (test/valgrind/ompi.supp, mpich.supp). Exit 77 when valgrind or the stub driver is missing.
b=$1; s=$2; shift 2
command -v valgrind >/dev/null 2>&1 || { echo "valgrind.sh: no valgrind: skipped"; exit 77; }
stub=${NM_STUB_DRIVER:-}
[ -n "$stub" ] && [ -f "$stub" ] || { echo "valgrind.sh: no stub libcuda.so: skipped"; exit 77; }
export NM_TEST_PRELOAD="$stub" NCCLMPI_AGREE=1
logs=$(mktemp -d) || exit 2
trap 'rm -rf "$logs"' EXIT
"$b/test/run_mpi.sh" 2 preload valgrind -q --error-exitcode=9 --num-callers=30 --suppressions="$s/test/valgrind/ompi.supp" \
    --suppressions="$s/test/valgrind/mpich.supp" \
    --log-file="$logs/vg.%p" "$@"
rc=$?
cat "$logs"/vg.* 2>/dev/null | head -200
[ $rc -eq 0 ] && ! grep -q "ERROR SUMMARY: [1-9]" "$logs"/vg.* 2>/dev/null && { echo "valgrind.sh: clean"; exit 0; }
echo "valgrind.sh: FAIL (rc $rc)"
exit 1
