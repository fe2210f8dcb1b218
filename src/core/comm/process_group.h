// ncclmpi: the process group of one MPI communicator on one device: its NCCL communicator, its
// comm stream, and the one path (run) every NCCL operation takes.
#ifndef NM_CORE_PROCESS_GROUP_H
#define NM_CORE_PROCESS_GROUP_H
#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/cuda/cuda_api.h"
#include "core/tl/nccl/nccl_api.h"
#include "route/nm_op.h"
#include "util/status.h"

namespace ncclmpi {

class Task;

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
    enum class State { OOB, INIT, READY, ERROR };
    using Body = std::function<nm_status_t(ProcessGroup &, CUstream)>;

    ProcessGroup(MPI_Comm comm, int id, int device, int rank, int size);
    ~ProcessGroup();
    ProcessGroup(const ProcessGroup &) = delete;
    ProcessGroup &operator=(const ProcessGroup &) = delete;

    // Collective over the MPI communicator: fresh ncclCommInitRank (unique id over PMPI).
    nm_status_t init_fresh();
    // Collective over the *parent's* ranks: ncclCommSplit(parent, color, key).
    nm_status_t init_split(ProcessGroup &parent, int color, int key);

    // Runs `body` (NCCL calls) on the comm stream inside one NCCL group, ordered after the
    // application's legacy-stream work. Blocking when task == nullptr (returns when the
    // result is in place); otherwise records completion in the task and returns at once.
    // `post` runs on the stream after the group (copies that must follow the NCCL kernels).
    template <class F>
    nm_status_t run(const nm_op_t *o, F &&body, Task *task, const Body *post = nullptr)
    {
        if (state_ != State::READY) return NM_ERR_NCCL;
        DeviceGuard g(ctx_);
        CUstream s = pick_stream(task);
        nm_status_t st = open_group(s);
        if (st != NM_OK) return st;
        return close_group(o, body(*this, s), s, task, post);
    }

    // Wait until everything queued on the comm stream is done (bounded by NCCLMPI_TIMEOUT).
    nm_status_t drain();
    void destroy();

    std::string describe() const;
    State state() const { return state_; }
    ncclComm_t nccl_comm() const { return nccl_; }
    CUstream stream() const { return stream_; }
    CUcontext ctx() const { return ctx_; }
    int device() const { return device_; }
    int rank() const { return rank_; }
    int size() const { return size_; }
    int id() const { return id_; }
    uint64_t seq() const { return seq_; }

    // Nonblocking tasks in flight: while any is, blocking calls also use the comm stream, so
    // that everything on this NCCL comm stays in issue order.
    void nb_started() { nb_inflight_++; }
    void nb_finished() { nb_inflight_--; }

    // Device scratch of at least `bytes`, valid until the next run on this group.
    void *scratch(size_t bytes);

  private:
    // Blocking calls run on the legacy default stream (NCCLMPI_CALC_STREAM=1): ordered after the
    // application's work for free. Nonblocking calls run on the comm stream, after an event.
    CUstream pick_stream(const Task *task) const;
    nm_status_t open_group(CUstream s);  // seq, order after the application, ncclGroupStart
    nm_status_t close_group(const nm_op_t *o, nm_status_t body_st, CUstream s, Task *task, const Body *post);
    nm_status_t setup_stream();
    nm_status_t finish_init(ncclResult_t r, const char *how, double t0);
    nm_status_t wait_event(CUevent ev, const nm_op_t *o);

    MPI_Comm comm_;
    int id_, device_, rank_, size_;
    State state_ = State::OOB;
    CUcontext ctx_ = nullptr;
    CUstream stream_ = nullptr;
    CUevent order_ev_ = nullptr;  // recorded on the legacy stream, waited on by stream_
    CUevent done_ev_ = nullptr;   // completion of blocking runs
    ncclComm_t nccl_ = nullptr;
    uint64_t seq_ = 0;
    int nb_inflight_ = 0;
    CUdeviceptr scratch_ = 0;
    size_t scratch_bytes_ = 0;
};

}  // namespace ncclmpi
#endif
