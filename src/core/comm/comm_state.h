// ncclmpi: per-MPI-communicator state: its process groups (one per device), found through an
// attribute whose delete callback tears them down; creation from a parent (ncclCommSplit);
// teardown before MPI_Finalize.
#ifndef NM_CORE_COMM_STATE_H
#define NM_CORE_COMM_STATE_H
#include <mpi.h>

#include <map>
#include <memory>
#include <string>

#include "core/comm/process_group.h"

namespace ncclmpi {

// Per-MPI-communicator state, found through an attribute (its delete callback tears it down).
struct CommState {
    MPI_Comm comm = MPI_COMM_NULL;
    int id = 0;
    int rank = 0, size = 0, remote_size = 0;
    bool inter = false;
    int nccl_ok = -1;  // -1 not yet checked, 0 staged only, 1 NCCL
    std::map<int, std::unique_ptr<ProcessGroup>> pgs;  // by device

    // The group for `device`, created collectively on first use. nullptr when the
    // communicator cannot use NCCL (then nccl_ok == 0 on every rank).
    ProcessGroup *group(int device, nm_status_t *st);
    std::string describe() const;
};

// State of `comm`, created on first sight. Never nullptr for a valid communicator.
CommState *comm_state(MPI_Comm comm);
CommState *comm_state_lookup(MPI_Comm comm);  // uncached
// Destroy every process group (children before parents) before the real MPI_Finalize.
void comm_states_teardown();
// A communicator was created from `parent`: derive its NCCL comm by split when possible.
void comm_state_created(MPI_Comm parent, MPI_Comm child);
int world_rank();

}  // namespace ncclmpi
#endif
