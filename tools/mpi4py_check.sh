#!/bin/sh
# tools/mpi4py_check.sh BUILDDIR [NP...]: mpi4py's own test suite on host buffers, under the MPI
# that BUILDDIR was configured with, without ncclmpi (plain) and with it preloaded; each rank's
# per-test results (ok, skipped, expected failure, FAIL, ERROR) must be the same in both runs.
# NP: the numbers of ranks (default: 1 2).
#
#   PYTHON        a python whose mpi4py is built against BUILDDIR's MPI (default: python3), e.g.
#                 MPICC=<prefix>/bin/mpicc pip install --no-binary mpi4py mpi4py==4.1.2
#                 Without PYTHON, BUILDDIR/mpi4py-venv/bin/python where that exists (what
#                 tools/quickstart.sh test provisions for CI), else python3; with
#                 MPI4PY_CHECK_VENV=1 (ctest mpi_mpi4py) that venv or PYTHON only, else skipped.
#   MPI4PY_TESTS  mpi4py's test/ directory (default: fetched from the sdist of the installed
#                 version with pip download into BUILDDIR/mpi4py-src)
#   MPI4PY_ARGS   more main.py arguments
#   MPI4PY_TEST_SPAWN  mpi4py's own switch (default 0: its tests that spawn processes, test_spawn
#                 and mpi4py.futures' process pools, report themselves skipped; Open MPI's
#                 MPI_Comm_spawn is unreliable in containers, with or without ncclmpi: under load
#                 a spawn failed and the run without the layer then hung; ncclmpi adds nothing to
#                 spawning)
#   MPI4PY_LIMIT  seconds a run may take (default 600; a 3-rank run under Open MPI 5 on two loaded
#                 cores took 252 s)
# Exit 0: identical results; 1: they differ or a run failed to start; 77: no mpi4py (skipped).
set -u
b=$(cd "${1:?usage: mpi4py_check.sh BUILDDIR [NP...]}" && pwd)
shift
nps=${*:-1 2}
py=${PYTHON:-}
[ -n "$py" ] || { [ -x "$b/mpi4py-venv/bin/python" ] && py=$b/mpi4py-venv/bin/python; } || py=python3
if [ "${MPI4PY_CHECK_VENV:-0}" = 1 ] && [ "$py" = python3 ]; then  # (ctest mpi_mpi4py)
  echo "mpi4py_check: no $b/mpi4py-venv (tools/quickstart.sh test makes one): skipped"; exit 77
fi
ver=$("$py" -c 'import mpi4py; print(mpi4py.__version__)' 2>/dev/null) || {
  echo "mpi4py_check: no mpi4py in $py: skipped (MPICC=... $py -m pip install --no-binary mpi4py mpi4py)"; exit 77; }
t=${MPI4PY_TESTS:-}
if [ -z "$t" ]; then
  src="$b/mpi4py-src"
  t="$src/mpi4py-$ver/test"
  if [ ! -f "$t/main.py" ]; then
    mkdir -p "$src" && "$py" -m pip download -q --no-binary :all: --no-deps "mpi4py==$ver" -d "$src" &&
      tar xzf "$src/mpi4py-$ver.tar.gz" -C "$src" || { echo "mpi4py_check: cannot fetch mpi4py $ver's tests" >&2; exit 1; }
  fi
fi
out="$b/mpi4py_check"
rm -rf "$out" && mkdir -p "$out"
# the layer really is in the preloaded runs
NCCLMPI_LOG=WARN "$b/test/run_mpi.sh" 1 preload "$py" -c \
  'import ctypes, mpi4py.MPI; ctypes.CDLL(None).ncclmpi_version; print("ncclmpi interposed")' >"$out/probe" 2>&1 ||
  { echo "mpi4py_check: ncclmpi is not interposed in a preloaded python:"; cat "$out/probe"; exit 1; }
fail=0
for np in $nps; do
  for mode in plain preload; do
    # each rank's unittest output (stderr) in a file of its own
    MPI4PY_TEST_SPAWN=${MPI4PY_TEST_SPAWN:-0} timeout -k 10 "${MPI4PY_LIMIT:-600}" "$b/test/run_mpi.sh" "$np" $mode sh -c 'o=$1; shift; exec "$@" 2>"$o.${OMPI_COMM_WORLD_RANK:-$PMI_RANK}"' sh \
      "$out/$mode.np$np" "$py" "$t/main.py" -v ${MPI4PY_ARGS:-} >"$out/$mode.np$np.stdout" 2>&1
    echo "mpi4py_check: mpi4py $ver, $np rank(s), $mode: exit $?, $(grep -h '^Ran ' "$out/$mode.np$np".[0-9]* | head -1)"
  done
  for r in $(seq 0 $((np - 1))); do
    for mode in plain preload; do
      # one line per test: "test_x (module.Class.test_x) ... ok" (the result may follow output)
      grep -E ' \.\.\. ' "$out/$mode.np$np.$r" 2>/dev/null | sed -E 's/^(.* \.\.\. ).*(ok|skipped.*|expected failure|unexpected success|FAIL|ERROR)$/\1\2/' |
        sort >"$out/$mode.np$np.$r.results"
    done
    if [ ! -s "$out/plain.np$np.$r.results" ]; then
      echo "mpi4py_check: FAIL: no results from rank $r of the plain run at $np rank(s) (see $out)"; fail=1
    elif ! diff "$out/plain.np$np.$r.results" "$out/preload.np$np.$r.results" >"$out/diff.np$np.$r"; then
      echo "mpi4py_check: FAIL: rank $r at $np rank(s): results differ with ncclmpi (< plain, > preload):"
      head -20 "$out/diff.np$np.$r"; fail=1
    else
      echo "mpi4py_check: rank $r at $np rank(s): $(wc -l <"$out/plain.np$np.$r.results") tests, identical results" \
        "($(grep -c ' ok$' "$out/plain.np$np.$r.results") ok, $(grep -c 'skipped' "$out/plain.np$np.$r.results") skipped," \
        "$(grep -cE 'FAIL$|ERROR$' "$out/plain.np$np.$r.results") failed without ncclmpi too)"
    fi
  done
done
exit $fail
