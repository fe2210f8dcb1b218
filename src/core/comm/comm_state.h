// ncclmpi: per-MPI-communicator state, found through an attribute whose delete callback releases
// it: its agreed NCCL capability (route.h's nm_cap_t), its process group, the hidden duplicate
// the engine agrees on coalesced groups over, and the engine's queue. The lifecycle and the
// argument that every rank takes the same steps are in doc/design.md.
#ifndef NM_CORE_COMM_STATE_H
#define NM_CORE_COMM_STATE_H
#include <mpi.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "route/route.h"

namespace ncclmpi {

struct Op;
struct SharedWin;
struct Neighbors;

// One agreement round of the engine: a PMPI_Iallreduce(MIN) of a proposal on the hidden comm.
struct Round {
    int proposal = 0, result = 0;
    MPI_Request req = MPI_REQUEST_NULL;
    double t0 = 0;
    bool abandoned = false;  // a peer failed the communicator: it may never join (not waited for)
};

struct CommState {
    MPI_Comm comm = MPI_COMM_NULL;
    int id = 0;
    int rank = 0, size = 0, remote_size = 0;
    bool inter = false;
    std::mutex mu;  // creation, launches and the queue of this communicator only
    std::atomic<int> cap{NM_CAP_UNKNOWN};
    int pending_device = -1;  // device of the nonblocking call that made it PENDING
    std::unique_ptr<ProcessGroup> pg;
    MPI_Comm hidden = MPI_COMM_NULL;
    std::string why_staged;
    std::string why_failed;  // FAILED by one of its agreements (core/engine/deadline.h), before a process group held a reason
    SharedWin *shared = nullptr;  // ranks sharing GPUs: the agreed window (tl/shared/shared_gpu.h)
    Neighbors *neigh = nullptr;   // neighbourhood collectives as point-to-point (tl/p2p/neighbor.h)
    // the device side's agreed id and device, and the processes in order (comm/side_cache.h)
    uint64_t side_id = 0;
    int side_device = -1;
    std::vector<int> world;
    bool world_known = false;
    // NCCLMPI_EAGER's split children: the parent's side id and which of its splits (agreed: every
    // rank of the parent splits it in the same order); the order of MPI_Finalize's destroys
    uint64_t split_of = 0;
    uint32_t split_seq = 0, splits = 0;

    // engine (engine.cc), under mu
    std::deque<Op *> queue;       // nonblocking NCCL operations not launched yet, in call order
    uint64_t seq = 0;             // NCCL operations issued on this communicator
    double last_nb = -1e9;        // when the last nonblocking operation was submitted
    std::vector<Round *> rounds;  // rounds whose result is known in advance, still in flight
    // set by a flush that found mu held by another thread: the holder flushes before unlocking
    std::atomic<bool> flush_req{false};

    // a send to this rank itself went to the real MPI on it (sticky): a message to itself may be
    // pending there, so a Sendrecv to itself takes the real MPI's order (tl/p2p/self_copy.h)
    mutable std::atomic<bool> self_sent{false};

    std::atomic<int> refs{1};  // 1 while the MPI communicator lives, +1 per operation in flight
    bool freed = false;

    int getcap() const { return cap.load(std::memory_order_acquire); }
    std::string describe() const;
};

// State of `comm`, created on first sight. Never nullptr for a valid communicator.
CommState *comm_state(MPI_Comm comm);
// The agreed creation of the NCCL communicator: collective over cs->comm, made at a point every
// rank reaches (a blocking collective). Leaves cap READY or STAGED, the same on every rank.
void comm_create(CommState *cs, int device);
// NM_ACT_CONNECT, in a blocking collective every rank of cs has data in: its NCCL sends and
// receives connected to every peer now (after a barrier of the real MPI), agreed; on a failure
// every rank marks it FAILED. doc/design.md, "Connected at creation".
void comm_connect_peers(CommState *cs);
// NCCLMPI_EAGER: a communicator was created from `parent` (every rank of the parent is here).
void comm_state_created(MPI_Comm parent, MPI_Comm child);
// Drop one reference; the last one destroys the process group and the state.
void comm_release(CommState *cs);
// Destroy every process group (children before parents, in an order every rank shares) before
// the real MPI_Finalize.
void comm_states_teardown();
// MPI_Finalize: every live communicator's agreement rounds still in flight completed.
void comm_states_drain_rounds();
int world_rank();
// MPI_Init's start-up reductions (ncclmpi's own, before the application's first call): the
// maximum of each of mine[0..n) over MPI_COMM_WORLD into all. A rank without ncclmpi never makes
// the matching call, so the wait says so after NCCLMPI_WARN_AFTER seconds (what: the reduction)
// and goes on waiting.
void world_max(const long long *mine, long long *all, int n, const char *what);

}  // namespace ncclmpi
#endif
