// ncclmpi: one device collective on the NCCL route, from its call to its completion. Everything a
// later launch needs is copied in at the call (the user may free a datatype right after an I-call;
// its arrays and buffers stay the user's until completion, as MPI requires). Ops come from a pool.
#ifndef NM_CORE_ENGINE_OP_H
#define NM_CORE_ENGINE_OP_H
#include <mpi.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/cuda/cuda_api.h"
#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"
#include "route/nm_op.h"
#include "route/route.h"
#include "util/status.h"

namespace ncclmpi {

struct CommState;
class Task;
struct Completion;

// A copy to run on the op's stream after its NCCL group (unpack into a non-contiguous or host
// receive buffer), or on the host once the op completed (from a pinned bounce buffer).
struct PostCopy {
    enum Kind { D2D, UNPACK_DEV, TO_BOUNCE } kind;
    CUdeviceptr dst, src;  // UNPACK_DEV: dst is the element base; TO_BOUNCE: dst the pinned bounce
    size_t bytes;
    int layout;            // index into Op::layouts, or -1 (contiguous), or -2 - k: Op::packed[k]
    void *host;            // TO_BOUNCE: where the bytes go on the host once the op completed
};

// A buffer whose layout has no runs (layout.h: too many, or a type it cannot decode), packed on
// the host with PMPI_Pack through a pinned copy of its whole span (tl/nccl/coll_nccl.cc).
struct HostPacked {
    MPI_Datatype type;
    int count;
    char *hbase;         // where the elements start in the host copy (or the host buffer itself)
    char *hspan;         // the span's first byte there
    CUdeviceptr dspan;   // the span in device memory, written back after the unpack; 0: host memory
    size_t span;         // its bytes
    CUcontext ctx;       // dspan's
};

struct Op {
    nm_op_t o{};                 // the call (pointers are the user's)
    int rank = 0, size = 1, n = 1;
    bool root = false, inplace = false;
    DtypeInfo sd{}, rd{};        // significant datatypes (copies); has_* says which
    bool has_sd = false, has_rd = false;
    MPI_Datatype sdup = MPI_DATATYPE_NULL, rdup = MPI_DATATYPE_NULL;  // kept alive for packing
    nm_memkind_t skind = NM_MEM_DEVICE, rkind = NM_MEM_DEVICE;       // kinds of the two buffers
    unsigned act = 0;            // NM_ACT_CARRIER
    CommState *cs = nullptr;
    uint64_t seq = 0;            // per-communicator sequence of NCCL operations
    CUevent order_ev = nullptr;  // the application's work this op follows (nonblocking calls)
    Task *task = nullptr;        // nonblocking: the task behind the user's request
    bool explicit_group = false; // issued inside ncclmpi_group_begin/end
    CUstream enq_stream = nullptr;  // MPIX_*_enqueue: the application's stream it is launched on
                                    // (no task); nullptr otherwise
    bool oneshot = false;        // runs as a one-shot kernel (tl/oneshot), not as an NCCL call
    const volatile uint64_t *kdone = nullptr;  // completion flag its kernel writes (one-shot, solo)
    uint64_t kdone_ticket = 0;
    double t_launch = 0;

    // launch state
    std::vector<PostCopy> post_first;  // explicit post copies of the body (run first)
    std::vector<PostCopy> post;        // unpacks of OUT segments
    std::vector<Layout> layouts;
    std::vector<HostPacked> packed;
    std::vector<int> zeros;            // zero counts/displacements of the carrier call
    std::vector<CUdeviceptr> scratch;
    std::vector<std::pair<void *, size_t>> bounce;  // pinned buffers (pointer, pool class)
    MPI_Request carrier = MPI_REQUEST_NULL;
    Completion *done = nullptr;
    // published last (release) by the launching thread: done and t_launch are set before it;
    // any thread may poll
    std::atomic<bool> launched{false};
    bool is_launched() const { return launched.load(std::memory_order_acquire); }
    bool enqueued() const { return enq_stream != nullptr; }

    void reset();  // back to a fresh op, keeping the vectors' capacity
    MPI_Datatype type(int which) const { return which ? (rdup != MPI_DATATYPE_NULL ? rdup : o.rtype) : (sdup != MPI_DATATYPE_NULL ? sdup : o.stype); }
    const DtypeInfo &info(int which) const { return which ? rd : sd; }
    std::string describe() const;
};

// Pool: no allocation per operation once warm.
Op *op_get();
void op_put(Op *op);

}  // namespace ncclmpi
#endif
