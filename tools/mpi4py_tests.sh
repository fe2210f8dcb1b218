#!/bin/sh
# tools/mpi4py_tests.sh [VERSION]: puts mpi4py's own test suite (the test/ folder of its source
# distribution on PyPI, default version 4.1.2) into .scratch/mpi4py/test, where
# `tools/gpu_check.sh mpi4py` looks for it. The suite is mpi4py's, not ours: it is fetched, never
# committed.
set -eu
v=${1:-4.1.2}
cd "$(dirname "$0")/.."
d=.scratch/mpi4py
rm -rf "$d" && mkdir -p "$d"
python3 -m pip download -q --no-deps --no-binary :all: "mpi4py==$v" -d "$d"
tar -C "$d" -xzf "$d/mpi4py-$v.tar.gz" "mpi4py-$v/test"
mv "$d/mpi4py-$v/test" "$d/test" && rm -rf "$d/mpi4py-$v" "$d/mpi4py-$v.tar.gz"
echo "mpi4py $v test suite in $d/test ($(ls "$d/test" | wc -l) files)"
