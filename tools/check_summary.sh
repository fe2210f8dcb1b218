#!/bin/sh
# check_summary.sh CTEST [ARGS...]: run CTest (make check does, in the build directory) and end
# with one line of counts, alone on its line, that CI reads:
#   320 passed, 0 failed, 154 skipped
# CTest's own output passes through, less its list of the tests that did not run (the gpu label
# without a GPU: ctest -N -L gpu lists them) and its "N% tests passed" line, which counts skipped
# tests as passed. Failed and timed-out tests count as failed. The full log stays in
# Testing/Temporary/LastTest.log. The exit status is CTest's.
if [ $# -eq 0 ]; then
  echo "usage: check_summary.sh CTEST [ARGS...]" >&2
  exit 2
fi
st=$(mktemp "${TMPDIR:-/tmp}/nm_check.XXXXXX") || exit 1
trap 'rm -f "$st"' EXIT
{ "$@" 2>&1; echo $? > "$st"; } | awk '
  /^The following tests did not run:/ { hide = 1; next }
  hide && /^\t/ { next }
  { hide = 0 }
  /^[0-9]+% tests passed, / { next }
  / Test +#[0-9]+: / {
    if ($0 ~ /\*\*\*Skipped/) skipped++
    else if ($0 ~ / Passed /) passed++
    else failed++
  }
  { print; fflush() }
  END { printf "%d passed, %d failed, %d skipped\n", passed, failed, skipped }'
rc=$(cat "$st")
exit "${rc:-1}"
