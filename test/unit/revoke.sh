#!/bin/sh
# revoke.sh BUILDDIR: calls with MPI_PROC_NULL on a communicator revoked with ULFM's
# MPIX_Comm_revoke (test/unit/revoke_prog.c) give the real MPI's answer through the
# communicator's error handler: MPI_Barrier, MPI_Send and MPI_Recv MPI_ERR_REVOKED (mpi4py's
# test_ulfm.py testRevoke). On the stand-in CUDA driver (attached), at 1 to 3 ranks, in each
# point-to-point envelope mode, at MPI_THREAD_SINGLE and at MPI_THREAD_MULTIPLE (as mpi4py
# initialises: a receive there took the receive gate, and was posted as MPI_Irecv, which Open MPI
# 5.0.11 completes with MPI_PROC_NULL on a revoked communicator; MPI_Recv returned MPI_SUCCESS).
# Skipped (77) where the MPI has no revocation (Open MPI 4.1: the program is not built) or where
# it is not on.
b=$1
d="$b/revoke_test"
prog="$b/test/unit/revoke_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in revoke "$b" "$d" "$prog"
fail=0
stand_in_envelopes revoke_prog "$b" "$d" "$prog" || fail=1
echo "revoke: the same at MPI_THREAD_MULTIPLE"
REVOKE_THREAD_MULTIPLE=1 stand_in_envelopes revoke_prog "$b" "$d" "$prog" || fail=1
exit $fail
