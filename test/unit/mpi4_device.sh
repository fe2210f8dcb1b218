#!/bin/sh
# mpi4_device.sh BUILDDIR: the MPI-4 calls of the table on device buffers of the stand-in CUDA
# driver (test/unit/mpi4_device_prog.c) at 1 to 3 ranks, with point-to-point envelopes off, in the
# host test mode and in device mode: MPI_Isendrecv(_replace) staged and checked against PMPI on host
# copies; persistent collectives, persistent neighbourhood collectives and partitioned calls
# refused with MPI_ERR_UNSUPPORTED_OPERATION. Skipped (77) where the MPI lacks them (Open MPI 4.1:
# the program is not built).
b=$1
d="$b/mpi4_device_test"
prog="$b/test/unit/mpi4_device_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mpi4_device "$b" "$d" "$prog"
stand_in_envelopes mpi4_device_prog "$b" "$d" "$prog" || exit 1
exit 0
