#!/bin/sh
# gpu_run.sh BUILDDIR NP PROGRAM [ARGS...]: skip (77) without a GPU, else run PROGRAM under
# mpirun with libncclmpi preloaded (NCCLMPI_* and NCCL_* variables pass through).
b=$1; np=$2; prog=$3; shift 3
"$b/test/gpu/gpu_probe" || exit $?
exec "$b/test/run_mpi.sh" "$np" preload "$prog" "$@"
