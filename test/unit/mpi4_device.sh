#!/bin/sh
# mpi4_device.sh BUILDDIR: the MPI-4 calls of the table on device buffers of the stand-in CUDA
# driver (test/unit/mpi4_device_prog.c) at 1 to 3 ranks, with point-to-point envelopes off, in the
# host test mode and in device mode: MPI_Isendrecv(_replace) staged and checked against PMPI on host
# copies; persistent collectives started many times against PMPI on host copies; partitioned
# communication staged per partition (device to device in these runs); the v/w persistent
# collectives and persistent neighbourhood collectives refused with MPI_ERR_UNSUPPORTED_OPERATION.
# Then at 2 and 3 ranks on the stand-in NCCL (a device per rank): the persistent allreduces'
# starts on the NCCL route. Then the partitioned cases one by one (MPI4_PART_CASE 0-5: host and
# device on either side, a datatype with gaps, other partitions on the receiver) at 2 and 3 ranks,
# a process each (Open MPI 5.0.11 mismatches a second partitioned pair in one process); MPI-4.1's
# MPI_Request_get_status_any/all/some on persistent device receives where the MPI has them. Skipped (77)
# where the MPI lacks them (Open MPI 4.1: the program is not built).
b=$1
d="$b/mpi4_device_test"
prog="$b/test/unit/mpi4_device_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in mpi4_device "$b" "$d" "$prog"
fail=0
stand_in_envelopes mpi4_device_prog "$b" "$d" "$prog" || fail=1
for np in 2 3; do
  FAKE_NCCL_SHM=1 FAKE_CUDA_DEVICE_PER_RANK=1 FAKE_CUDA_ASYNC=1 NCCLMPI_ONESHOT=0 MPI4_EXPECT_NCCL=1 \
    stand_in_run mpi4_device_prog "$b" "$d" "the stand-in NCCL" $np "$prog" || fail=1
done
for k in 0 1 2 3 4 5; do
  for np in 2 3; do
    MPI4_PART_CASE=$k MPI4_ONLY=part stand_in_run mpi4_device_prog "$b" "$d" "partitioned case $k" $np "$prog" || fail=1
  done
done
# MPI-4.1's MPI_Request_get_status_any/all/some, where the MPI has them (MPICH 4.2; the default runs
# above include them too), in each envelope mode
if grep -q "define NM_BUILD_HAVE_MPI41 1" "$b/nm_build.h"; then
  MPI4_ONLY=status41 stand_in_envelopes mpi4_device_prog "$b" "$d" "$prog" || fail=1
fi
exit $fail
