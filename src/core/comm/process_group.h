// ncclmpi: the process group of one MPI communicator on one device: its NCCL communicator, its
// comm stream, an event pool, and its failure state. Created by the communicator's agreed
// creation (comm_state.cc); launched on by the engine (engine/engine.cc).
#ifndef NM_CORE_PROCESS_GROUP_H
#define NM_CORE_PROCESS_GROUP_H
#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/cuda_api.h"
#include "core/tl/nccl/nccl_api.h"
#include "util/status.h"

namespace ncclmpi {

struct OneshotWindow;

// Makes the device's primary context current for a scope and restores the previous one.
class DeviceGuard {
  public:
    explicit DeviceGuard(CUcontext ctx);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;

  private:
    CUcontext prev_ = nullptr;
    bool switched_ = false;
};

class ProcessGroup {
  public:
    enum class State { OOB, READY, FAILED };

    ProcessGroup(int comm_id, int device, int rank, int size);
    ~ProcessGroup();
    ProcessGroup(const ProcessGroup &) = delete;
    ProcessGroup &operator=(const ProcessGroup &) = delete;

    // Local readiness (driver, device, context, NCCL library), making nothing. false with a
    // reason: then every rank chooses the staged path for the communicator (agreed on first).
    bool check(std::string *why);
    // The group's own resources (comm stream, completion flags), after check(); false with a
    // reason. Every rank must know that every other one has them before any enters NCCL's init.
    bool open(std::string *why);
    bool prepare(std::string *why) { return check(why) && open(why); }
    // A kept group taken over by another communicator of the same processes (comm/side_cache.h):
    // its NCCL communicator, streams, tickets and one-shot window go on as they were.
    void adopt(int comm_id) { comm_id_ = comm_id; }
    // ncclCommInitRankConfig with an id every rank received; blocking.
    nm_status_t init_with_id(const ncclUniqueId &id);
    // ncclCommSplit from the parent's NCCL communicator (collective over the parent's ranks).
    nm_status_t init_split(ProcessGroup &parent, int color, int key);
    // NCCL's connections made now, waited for (doc/design.md, "Connected at creation"): NCCL
    // connects an algorithm at its first use, and a peer's sends and receives at the first one,
    // waiting on the host for the peers. algorithms: one collective of each kind NCCL has an
    // algorithm choice for, on a ladder of sizes (NCCL picks by size); peers: one byte to and
    // from every peer. Collective over comm (the group's processes in its order): every rank
    // agrees on its buffer before any NCCL call and on each call before the next, so all succeed
    // or all fail (then the NCCL communicator is aborted on every rank). ready: this rank can
    // take part (its earlier work drained); false on any rank fails every rank.
    nm_status_t connect(bool algorithms, bool peers, MPI_Comm comm, bool ready);
    // Every peer's sends and receives connected (by connect(), or a group of one rank). The same
    // on every rank of the group: changed only by a connect() every rank makes.
    bool peers_connected() const { return peers_connected_.load(std::memory_order_acquire); }

    // Abort the NCCL communicator and keep the reason; later operations fail at once.
    // Idempotent and thread-safe: waits for a launch in progress on another thread (use_mu()).
    // true for the call that failed it.
    bool fail(const std::string &why);
    // A failure of this rank alone (a launch that could not be made here): fail(), and tell every
    // peer over the notice communicator, so that a peer waiting for this rank's part of an NCCL
    // call fails too (check_async) instead of waiting for ever. doc/design.md, "Failures".
    void fail_tell(const std::string &why);
    // The communicator failures are told on (a duplicate of the MPI communicator the group was
    // agreed on, same processes in the same order; the group frees it at destroy()).
    void set_notice(MPI_Comm c) { notice_ = c; }
    // Poll NCCL's asynchronous error and the peers' notices of failure; on either, fail() and
    // return NM_ERR_NCCL. Skips the NCCL poll while another thread uses the NCCL communicator.
    // Called about once a millisecond by a wait, never on a launch.
    nm_status_t check_async();
    // Held around every use of nccl_comm() (launches, polls, the abort): the abort frees it.
    std::recursive_mutex &use_mu() { return use_mu_; }
    bool failed() const { return state_.load(std::memory_order_acquire) == State::FAILED; }
    std::string fail_reason() const;
    // Destroy (or abort, after a failure) the NCCL communicator and the local resources.
    void destroy();

    CUevent event_get();
    void event_put(CUevent ev);

    // Completion flags: a launch on stream s ends with a 64-bit write of its ticket into pinned
    // host memory (cuStreamWriteValue64, after the launch's work in stream order), so completion is
    // a load (an event query costs about 1.3 us on H200). One slot per stream kind (the comm
    // stream, the legacy stream): tickets are issued under use_mu() in stream order, so a slot
    // only grows. Without 64-bit stream memory operations: nullptr, and events are used.
    const volatile uint64_t *flag_write(CUstream s, uint64_t *ticket);
    // The next ticket of s's slot without writing it: the caller's kernel writes it at *dflag
    // (device address of the slot) as its last action. nullptr without flags.
    const volatile uint64_t *flag_reserve(CUstream s, uint64_t *ticket, CUdeviceptr *dflag);

    std::string describe() const;
    State state() const { return state_.load(std::memory_order_acquire); }
    ncclComm_t nccl_comm() const { return nccl_; }
    CUstream stream() const { return stream_; }
    // A device buffer of at least `bytes` for work queued on stream() only, in its order (the
    // fused allreduces of a group: tl/nccl/fuse.h): kept for the next use, grown when short, up to
    // kStreamBufferMax (a larger need is the caller's to allocate); 0 when it cannot be had.
    // Called under use_mu().
    static constexpr size_t kStreamBufferMax = 64u << 20;
    CUdeviceptr stream_buffer(size_t bytes);
    CUcontext ctx() const { return ctx_; }
    int device() const { return device_; }
    int rank() const { return rank_; }
    int size() const { return size_; }

    // the one-shot window (tl/oneshot), agreed at creation; nullptr when the group has none
    OneshotWindow *oneshot() const { return oneshot_; }
    void set_oneshot(OneshotWindow *w) { oneshot_ = w; }

    // the NCCL calls of the launch in progress (under use_mu(); kept: no allocation once warm)
    std::vector<NcclRec> recs;

    // operations launched and not yet known complete (blocking calls use the comm stream while
    // any is, so that everything on this NCCL communicator stays in issue order)
    std::atomic<int> inflight{0};
    // the stream of the last launch (under the communicator's lock): a launch on another stream
    // while operations are in flight waits for it, so this NCCL communicator's work runs in issue
    // order whatever streams it was launched on (MPIX_*_enqueue launch on the application's)
    CUstream last_stream = nullptr;

  private:
    nm_status_t finish_init(ncclResult_t r, const char *how, double t0);
    bool connect_step(int i, bool algorithms, bool peers, void *p, ncclResult_t *r);
    bool heard();  // a peer's notice of failure received: fail()

    int comm_id_, device_, rank_, size_;
    std::atomic<State> state_{State::OOB};
    CUcontext ctx_ = nullptr;
    CUstream stream_ = nullptr;
    ncclComm_t nccl_ = nullptr;
    mutable std::mutex mu_;  // fail reason, event pool
    std::recursive_mutex use_mu_;
    std::string fail_reason_;
    std::vector<CUevent> events_;
    std::vector<CUevent> all_events_;
    volatile uint64_t *flags_ = nullptr;  // pinned host slots [comm stream, legacy stream]
    CUdeviceptr sbuf_ = 0;                // stream_buffer()
    size_t sbuf_cap_ = 0;
    CUdeviceptr dflags_ = 0;
    uint64_t tickets_[2] = {0, 0};
    std::atomic<bool> peers_connected_;
    OneshotWindow *oneshot_ = nullptr;
    MPI_Comm notice_ = MPI_COMM_NULL;  // set_notice()
};

}  // namespace ncclmpi
#endif
