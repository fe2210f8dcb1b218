#!/bin/sh
# init_partial.sh BUILD_DIR: two ranks, libncclmpi preloaded into one only (an MPMD command line
# that exports LD_PRELOAD to its first app context). The rank with ncclmpi waits in MPI_Init for
# a start-up reduction the other never makes; it must say so (NCCLMPI_WARN_AFTER=1) instead of
# waiting silently. The job is then killed: passes when the warning came.
B=${1:?usage: init_partial.sh BUILD_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_pml="^ucx" OMPI_MCA_mtl="^ofi"
unset LD_PRELOAD
out=$(NCCLMPI_WARN_AFTER=1 timeout 8 mpirun -np 1 -x NCCLMPI_WARN_AFTER -x LD_PRELOAD="$B/.libs/libncclmpi.so" \
      "$B/test/mpi/hostonly" : -np 1 "$B/test/mpi/hostonly" 2>&1)
printf '%s\n' "$out" | head -20
case "$out" in
*"MPI_Init has waited"*"is libncclmpi loaded in every rank"*) echo "init_partial: warned"; exit 0 ;;
esac
echo "init_partial: no warning from the rank waiting in MPI_Init" >&2
exit 1
