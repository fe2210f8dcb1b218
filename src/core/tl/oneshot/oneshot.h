// ncclmpi: the one-shot transport. Small device allreduces as one kernel per rank that pushes its
// contribution into every peer's window over NVLink and reduces the contributions in rank order
// (protocol: oneshot_abi.h). Kernels are compiled by nvcc at build time and embedded; without
// them (configure --without-kernels, or no nvcc) this transport reports itself unavailable.
#ifndef NM_CORE_ONESHOT_H
#define NM_CORE_ONESHOT_H
#include <mpi.h>
#include <stddef.h>

#include "util/status.h"

namespace ncclmpi {

class ProcessGroup;
class NcclCall;
struct DtypeInfo;

// The group's window: this rank's allocation, every peer's mapped, the abort word. Made by
// oneshot_setup, released by oneshot_release (ProcessGroup::destroy).
struct OneshotWindow;

// The kernels' element kind of a predefined datatype and the ops MPI defines on it that they run
// (a bit per NM_OS_* op); -1 and 0 when none (dtype.cc caches it in DtypeInfo).
void oneshot_kind(MPI_Datatype basic, int *kind, unsigned *ops);

// The element kind (NM_OS_I8...) and op (NM_OS_SUM...) of a reduction of the signature d with op
// that the kernels implement, or false.
bool oneshot_reduction(const DtypeInfo *d, MPI_Op op, int *kind, int *opi);

// Collective over `comm` (every rank of it, at the group's creation, after NCCL initialised on
// every rank): allocate this rank's window, exchange CUDA IPC handles, map every peer's, and
// agree. On success on every rank, pg gets the window; otherwise no rank keeps one (one DEBUG
// line per rank with its reason), so the choice is the same on every rank.
void oneshot_setup(ProcessGroup *pg, MPI_Comm comm);
void oneshot_release(OneshotWindow *w);
// Make waiting kernels give up (the group failed).
void oneshot_abort(OneshotWindow *w);

// The one-shot path can run this call: MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block (a
// kernel for the basic type and op), MPI_Bcast, MPI_Allgather (any type), their nonblocking forms,
// on a group with a window, 1 <= count, count x the type's size <= NCCLMPI_ONESHOT_MAX (count: the
// call's receive count). Reads only facts every rank of the communicator shares (the kind, the
// signature, the op, the count, the agreed window, the settings), so every rank answers the same.
bool oneshot_fits(const ProcessGroup *pg, int kind, const DtypeInfo *d, MPI_Op op, long long count);

// The op table's body on the one-shot route: one kernel launch on the call's stream.
nm_status_t oneshot_run(NcclCall &c);

}  // namespace ncclmpi
#endif
