#!/bin/sh
# init_partial.sh BUILD_DIR: two ranks, libncclmpi preloaded into one only (an MPMD command line
# that exports LD_PRELOAD to its first app context). The rank with ncclmpi makes start-up
# reductions in MPI_Init that the other never makes: it must not wait silently.
#   1. the other rank only makes a point-to-point call (init_pair): the reduction waits, and says
#      so after NCCLMPI_WARN_AFTER=1 s;
#   2. the other rank makes collective calls of its own (hostonly's MPI_Comm_dup): the reduction
#      may meet them and the settings check fails (or it waits, and says so).
# Both messages ask whether libncclmpi is loaded in every rank. Each job is killed after 8 s.
B=${1:?usage: init_partial.sh BUILD_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_pml="^ucx" OMPI_MCA_mtl="^ofi"
unset LD_PRELOAD
bad=0
for prog in init_pair hostonly; do
  out=$(NCCLMPI_WARN_AFTER=1 timeout 8 mpirun -np 1 -x NCCLMPI_WARN_AFTER -x LD_PRELOAD="$B/.libs/libncclmpi.so" \
        "$B/test/mpi/$prog" : -np 1 "$B/test/mpi/$prog" 2>&1)
  printf '%s\n' "$out" | grep -v "^\[.*\] \[ *[0-9]*\]" | head -8
  case "$prog:$out" in
  init_pair:*"MPI_Init has waited"*"is libncclmpi loaded in every rank"*) echo "init_partial: $prog: warned" ;;
  hostonly:*"is libncclmpi loaded in every rank"*) echo "init_partial: $prog: said so" ;;
  *) echo "init_partial: $prog: nothing said by the rank with ncclmpi" >&2; bad=1 ;;
  esac
done
exit $bad
