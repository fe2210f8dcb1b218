// ncclmpi: process groups (NCCL comm + comm stream per MPI communicator and device).
#include "core/comm/process_group.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/engine/task.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

DeviceGuard::DeviceGuard(CUcontext ctx)
{
    if (cu.cuCtxGetCurrent(&prev_) != CUDA_SUCCESS) prev_ = nullptr;
    if (prev_ != ctx) switched_ = cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

DeviceGuard::~DeviceGuard()
{
    if (switched_) cu.cuCtxSetCurrent(prev_);
}

ProcessGroup::ProcessGroup(MPI_Comm comm, int id, int device, int rank, int size)
    : comm_(comm), id_(id), device_(device), rank_(rank), size_(size)
{
}

ProcessGroup::~ProcessGroup() { destroy(); }

std::string ProcessGroup::describe() const
{
    static const char *const st[] = {"OOB", "INIT", "READY", "ERROR"};
    char b[160];
    snprintf(b, sizeof(b), "pg%d{dev %d, rank %d/%d, %s, seq %llu}", id_, device_, rank_, size_,
             st[(int)state_], (unsigned long long)seq_);
    return b;
}

nm_status_t ProcessGroup::setup_stream()
{
    CUdevice dev;
    NM_CU_CHECK(cu.cuDeviceGet(&dev, device_), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuDevicePrimaryCtxRetain(&ctx_, dev), return NM_ERR_CUDA);
    DeviceGuard g(ctx_);
    NM_CU_CHECK(cu.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuEventCreate(&order_ev_, CU_EVENT_DISABLE_TIMING), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuEventCreate(&done_ev_, CU_EVENT_DISABLE_TIMING), return NM_ERR_CUDA);
    return NM_OK;
}

nm_status_t ProcessGroup::finish_init(ncclResult_t r, const char *how, double t0)
{
    if (r != ncclSuccess) {
        NM_WARN(INIT, "%s on device %d failed: %s (%s)", how, device_, nccl.ncclGetErrorString(r),
                nccl.ncclGetLastError(nullptr));
        nccl_ = nullptr;
        state_ = State::ERROR;
        return NM_ERR_NCCL;
    }
    state_ = State::READY;
    NM_INFO(INIT, "%s: %s in %.1f ms", describe().c_str(), how, 1e3 * (nm_now_s() - t0));
    return NM_OK;
}

nm_status_t ProcessGroup::init_fresh()
{
    double t0 = nm_now_s();
    state_ = State::INIT;
    nm_status_t st = nccl_load();
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof(msg));
    if (rank_ == 0) msg.ok = st == NM_OK && nccl.ncclGetUniqueId(&msg.id) == ncclSuccess;
    PMPI_Bcast(&msg, sizeof(msg), MPI_BYTE, 0, comm_);
    ncclResult_t r = ncclInternalError;
    if (st == NM_OK && msg.ok && setup_stream() == NM_OK) {
        DeviceGuard g(ctx_);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        r = nccl.ncclCommInitRankConfig(&nccl_, size_, msg.id, rank_, &cfg);
    }
    return finish_init(r, "ncclCommInitRank", t0);
}

nm_status_t ProcessGroup::init_split(ProcessGroup &parent, int color, int key)
{
    double t0 = nm_now_s();
    state_ = State::INIT;
    ncclResult_t r = ncclInvalidUsage;
    if (nccl.ncclCommSplit && setup_stream() == NM_OK) {
        DeviceGuard g(ctx_);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.splitShare = 1;
        r = nccl.ncclCommSplit(parent.nccl_comm(), color, key, &nccl_, &cfg);
    }
    return finish_init(r, "ncclCommSplit", t0);
}

void *ProcessGroup::scratch(size_t bytes)
{
    if (bytes == 0) bytes = 1;  // a valid address even for empty copies
    if (bytes <= scratch_bytes_) return (void *)scratch_;
    DeviceGuard g(ctx_);
    if (scratch_) {
        cu.cuStreamSynchronize(stream_);
        cu.cuStreamSynchronize(CU_STREAM_LEGACY);
        cu.cuMemFree(scratch_);
        scratch_ = 0;
        scratch_bytes_ = 0;
    }
    if (cu.cuMemAlloc(&scratch_, bytes) != CUDA_SUCCESS) return nullptr;
    scratch_bytes_ = bytes;
    return (void *)scratch_;
}

// Waits for `ev`, watching NCCL's asynchronous error and NCCLMPI_TIMEOUT.
nm_status_t ProcessGroup::wait_event(CUevent ev, const nm_op_t *o)
{
    double t0 = 0;
    for (unsigned spin = 0;; spin++) {
        CUresult q = cu.cuEventQuery(ev);
        if (q == CUDA_SUCCESS) return NM_OK;
        if (q != CUDA_ERROR_NOT_READY) {
            NM_ERROR(COLL, "%s: %s: event query failed: %s", describe().c_str(), o ? nm_opkind_name(o->kind) : "drain",
                     cuda_errstr(q));
            state_ = State::ERROR;
            return NM_ERR_CUDA;
        }
        if ((spin & 1023) == 1023) {
            ncclResult_t ae = ncclSuccess;
            nccl.ncclCommGetAsyncError(nccl_, &ae);
            if (ae != ncclSuccess && ae != ncclInProgress) {
                NM_ERROR(COLL, "%s: NCCL asynchronous error: %s", describe().c_str(), nccl.ncclGetErrorString(ae));
                state_ = State::ERROR;
                return NM_ERR_NCCL;
            }
            if (nm_cfg.TIMEOUT > 0) {
                if (t0 == 0) t0 = nm_now_s();
                else if (nm_now_s() - t0 > nm_cfg.TIMEOUT) {
                    NM_ERROR(COLL, "%s: %s did not complete in %ld s; aborting the NCCL communicator",
                             describe().c_str(), o ? nm_opkind_name(o->kind) : "drain", nm_cfg.TIMEOUT);
                    state_ = State::ERROR;
                    return NM_ERR_TIMEOUT;
                }
            }
            sched_yield();
        }
    }
}

CUstream ProcessGroup::pick_stream(const Task *task) const
{
    return !task && nm_cfg.CALC_STREAM && nb_inflight_ == 0 ? CU_STREAM_LEGACY : stream_;
}

nm_status_t ProcessGroup::open_group(CUstream s)
{
    seq_++;
    if (nm_cfg.STREAM_ORDER && s != CU_STREAM_LEGACY) {
        NM_CU_CHECK(cu.cuEventRecord(order_ev_, CU_STREAM_LEGACY), return NM_ERR_CUDA);
        NM_CU_CHECK(cu.cuStreamWaitEvent(s, order_ev_, 0), return NM_ERR_CUDA);
    }
    NM_NCCL_CHECK(nccl.ncclGroupStart(), return NM_ERR_NCCL);
    return NM_OK;
}

nm_status_t ProcessGroup::close_group(const nm_op_t *o, nm_status_t st, CUstream s, Task *task, const Body *post)
{
    ncclResult_t ge = nccl.ncclGroupEnd();
    if (st != NM_OK) return st;
    if (ge != ncclSuccess) {
        NM_ERROR(COLL, "%s: ncclGroupEnd for %s failed: %s (%s)", describe().c_str(), nm_opkind_name(o->kind),
                 nccl.ncclGetErrorString(ge), nccl.ncclGetLastError(nccl_));
        return NM_ERR_NCCL;
    }
    if (post && (st = (*post)(*this, s)) != NM_OK) return st;
    if (task) return task->record_on(s);
    NM_CU_CHECK(cu.cuEventRecord(done_ev_, s), return NM_ERR_CUDA);
    return wait_event(done_ev_, o);
}

nm_status_t ProcessGroup::drain()
{
    if (!stream_ || state_ == State::ERROR) return NM_OK;
    DeviceGuard g(ctx_);
    NM_CU_CHECK(cu.cuEventRecord(done_ev_, stream_), return NM_ERR_CUDA);
    return wait_event(done_ev_, nullptr);
}

void ProcessGroup::destroy()
{
    if (!ctx_) return;
    {
        DeviceGuard g(ctx_);
        if (nccl_) {
            if (state_ == State::ERROR) nccl.ncclCommAbort(nccl_);
            else {
                drain();
                nccl.ncclCommDestroy(nccl_);
            }
            nccl_ = nullptr;
        }
        if (scratch_) cu.cuMemFree(scratch_);
        if (order_ev_) cu.cuEventDestroy(order_ev_);
        if (done_ev_) cu.cuEventDestroy(done_ev_);
        if (stream_) cu.cuStreamDestroy(stream_);
    }
    scratch_ = 0;
    order_ev_ = done_ev_ = nullptr;
    stream_ = nullptr;
    ctx_ = nullptr;
    state_ = State::OOB;
    NM_DEBUG(INIT, "pg%d destroyed", id_);
}

}  // namespace ncclmpi
