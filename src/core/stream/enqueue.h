// ncclmpi: operations enqueued on a CUDA stream (MPICH's MPIX_Stream API, src/core/stream/mpix.cc).
//
// An MPIX_*_enqueue call is dispatched as its blocking form (MPIX_Allreduce_enqueue as
// MPI_Allreduce: the route, and so what the other ranks see, is the blocking call's) with the
// calling thread's Enqueue set. Where that route is NCCL's (or a one-shot kernel's) and every
// buffer is dense device memory on the stream's device, the operation is launched on the stream
// and the call returns without waiting (engine_run_enqueued). Anywhere else the stream's work so
// far is waited for first and the blocking call runs as usual, so it is complete, in the stream's
// order, when the call returns. The argument is in doc/design.md ("Stream-ordered calls").
#ifndef NM_CORE_STREAM_ENQUEUE_H
#define NM_CORE_STREAM_ENQUEUE_H
#include <cuda.h>
#include <mpi.h>

#include "util/status.h"

namespace ncclmpi {

struct CommState;
struct BufRef;

struct Enqueue {
    CUstream stream;
    CUcontext ctx;     // the stream's context
    const char *call;  // "MPIX_Allreduce_enqueue"
    bool direct;       // set by dispatch: launched on the stream (nothing waited for)
};

// The calling thread's enqueue call in progress, or nullptr (the common case).
extern thread_local Enqueue *nm_enqueue_now __attribute__((tls_model("initial-exec")));

// Whether a blocking call on an engine route can run on the enqueue's stream: no real-MPI part,
// every buffer dense device memory, the stream in the context of the communicator's GPU.
bool enqueue_direct_ok(const Enqueue *e, const CommState *cs, const BufRef *b, int nb);
// Wait on the host until the stream's work so far has completed, keeping MPI moving.
nm_status_t enqueue_sync(Enqueue *e);
// Whether comm was made by MPIX_Stream_comm_create(_multiplex), or duplicated from one: a fact
// every rank of it shares (each rank's communicator carries the attribute, a null stream too).
bool comm_carries_streams(MPI_Comm comm);

}  // namespace ncclmpi
#endif
