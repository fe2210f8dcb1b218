// ncclmpi: blocking collectives of ranks that share a GPU (NCCL refuses them) on the GPU itself,
// through CUDA IPC, instead of through host memory and the real MPI.
//
// Each rank of such a communicator owns a device window of two slots (parities) that every other
// rank maps. A call moves its data in chunks of at most a slot: each rank copies its chunk into its
// own slot (after the application's work on the legacy stream; Alltoall, Scatter and
// Reduce_scatter(_block): one piece per destination rank) and waits for the copy, the ranks meet in a
// PMPI_Barrier, then each rank builds its result from the slots it needs (a kernel that combines
// the n contributions in rank order, the same bits on every rank; or copies of its blocks). Chunks
// alternate parities: a rank writes a slot again two chunks later, after the barrier of the chunk
// between, which every rank enters only after its reads of that slot finished.
// No kernel waits for another process: the host orders everything, so a failed or slow peer
// leaves its partners in the real MPI's barrier, watched as any staged call.
#ifndef NM_CORE_SHARED_GPU_H
#define NM_CORE_SHARED_GPU_H
#include <mpi.h>

#include "util/status.h"

namespace ncclmpi {

struct CommState;
struct OpCtx;
struct SharedWin;

// Collective over cs->comm, at the point every rank decided together that its ranks share GPUs
// (comm_create): allocate, exchange and map the windows; every rank keeps one (cs->shared) or none.
void shared_setup(CommState *cs, int device);
void shared_release(SharedWin *w);

// The call runs here: a blocking MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter(_block), MPI_Scan,
// MPI_Exscan (a reduction the kernels implement), MPI_Bcast, MPI_Allgather(v), MPI_Gather,
// MPI_Scatter or MPI_Alltoall on a communicator with a window, of at least the agreed number of
// bytes. Reads only facts every rank shares (the kind, the signature, the counts MPI gives every
// rank, the op, the agreed window and threshold).
bool shared_applies(const OpCtx &c);
// Runs it (every rank makes every barrier, even after a local failure). *mpi_rc: the real MPI's.
nm_status_t shared_run(const OpCtx &c, int *mpi_rc);

}  // namespace ncclmpi
#endif
