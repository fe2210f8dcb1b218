// ncclmpi: process groups (NCCL comm + comm stream per MPI communicator and device).
#include "core/comm/process_group.h"

#include <algorithm>

#include <stdlib.h>
#include <string.h>

#include "core/engine/deadline.h"
#include "core/engine/engine.h"
#include "core/tl/oneshot/oneshot.h"
#include "util/config.h"
#include "util/log.h"
#include "util/watchdog.h"

namespace ncclmpi {

DeviceGuard::DeviceGuard(CUcontext ctx)
{
    if (cu.cuCtxGetCurrent(&prev_) != CUDA_SUCCESS) prev_ = nullptr;
    if (ctx && prev_ != ctx) switched_ = cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

DeviceGuard::~DeviceGuard()
{
    if (switched_) cu.cuCtxSetCurrent(prev_);
}

ProcessGroup::ProcessGroup(int comm_id, int device, int rank, int size)
    : comm_id_(comm_id), device_(device), rank_(rank), size_(size), peers_connected_(size < 2)
{
}

ProcessGroup::~ProcessGroup() { destroy(); }

std::string ProcessGroup::describe() const
{
    static const char *const st[] = {"OOB", "READY", "FAILED"};
    char b[128];
    snprintf(b, sizeof(b), "pg%d{dev %d, rank %d/%d, %s}", comm_id_, device_, rank_, size_, st[(int)state()]);
    return b;
}

bool ProcessGroup::check(std::string *why)
{
    CUdevice dev;
    if (!cuda_attached()) { *why = "no CUDA driver in the process"; return false; }
    if (device_ < 0) { *why = "no current CUDA device"; return false; }
    if (cu.cuDeviceGet(&dev, device_) != CUDA_SUCCESS) { *why = "cuDeviceGet failed"; return false; }
    if (!ctx_ && cu.cuDevicePrimaryCtxRetain(&ctx_, dev) != CUDA_SUCCESS) { *why = "no CUDA context"; ctx_ = nullptr; return false; }
    if (!cuda_ctx_current(device_)) { *why = "the device's CUDA context was reset"; return false; }  // (noted here)
    if (nccl_load() != NM_OK) { *why = "NCCL library not loadable (NCCLMPI_NCCL_LIB)"; return false; }
    return true;
}

bool ProcessGroup::open(std::string *why)
{
    CUdevice dev;
    if (!ctx_ || cu.cuDeviceGet(&dev, device_) != CUDA_SUCCESS) { *why = "no CUDA context"; return false; }
    DeviceGuard g(ctx_);
    if (cu.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) { *why = "cannot create a CUDA stream"; return false; }
    int memops = 0;
    void *h = nullptr;
    // (a group of one rank: its NCCL calls are local copies of about a microsecond, which the
    // flag's write, 1.8-2.6 us of host time, cannot hide behind; events complete it sooner)
    if (nm_cfg.FLAG_POLL && size_ > 1 && cu.cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS &&
        memops && cu.cuMemHostAlloc(&h, 2 * sizeof(uint64_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
        if (cu.cuMemHostGetDevicePointer(&dflags_, h, 0) == CUDA_SUCCESS) {
            flags_ = static_cast<volatile uint64_t *>(h);
            flags_[0] = flags_[1] = 0;
        } else {
            cu.cuMemFreeHost(h);
        }
    }
    NM_DEBUG(INIT, "pg%d: completion by %s", comm_id_, flags_ ? "host flags" : "events");
    return true;
}

const volatile uint64_t *ProcessGroup::flag_reserve(CUstream s, uint64_t *ticket, CUdeviceptr *dflag)
{
    if (!flags_) return nullptr;
    const int slot = s == CU_STREAM_LEGACY ? 1 : 0;
    *ticket = ++tickets_[slot];
    *dflag = dflags_ + slot * sizeof(uint64_t);
    return flags_ + slot;
}

const volatile uint64_t *ProcessGroup::flag_write(CUstream s, uint64_t *ticket)
{
    CUdeviceptr d;
    const volatile uint64_t *f = flag_reserve(s, ticket, &d);
    if (f && cu.cuStreamWriteValue64(s, d, *ticket, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        --tickets_[s == CU_STREAM_LEGACY ? 1 : 0];  // not issued: the next launch takes this ticket
        return nullptr;
    }
    return f;
}

nm_status_t ProcessGroup::finish_init(ncclResult_t r, const char *how, double t0)
{
    if (r != ncclSuccess) {
        NM_WARN(INIT, "%s on device %d failed: %s (%s)", how, device_, nccl.ncclGetErrorString(r),
                nccl.ncclGetLastError(nullptr));
        nccl_ = nullptr;
        return NM_ERR_NCCL;
    }
    state_.store(State::READY, std::memory_order_release);
    NM_INFO(INIT, "%s: %s in %.1f ms", describe().c_str(), how, 1e3 * (nm_now_s() - t0));
    return NM_OK;
}

nm_status_t ProcessGroup::init_with_id(const ncclUniqueId &id)
{
    double t0 = nm_now_s();
    DeviceGuard g(ctx_);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    return finish_init(nccl.ncclCommInitRankConfig(&nccl_, size_, id, rank_, &cfg), "ncclCommInitRank", t0);
}

nm_status_t ProcessGroup::init_split(ProcessGroup &parent, int color, int key)
{
    double t0 = nm_now_s();
    if (!nccl.ncclCommSplit) return NM_ERR_NCCL;
    DeviceGuard g(ctx_);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.splitShare = 1;
    return finish_init(nccl.ncclCommSplit(parent.nccl_comm(), color, key, &nccl_, &cfg), "ncclCommSplit", t0);
}

// The warm-up ladder (bytes of the whole call, as NCCL sizes it when it picks an algorithm: ring,
// tree, NVLS...; each first use of an algorithm connects it): allreduces (a sum and a product) at
// every size from 4 bytes to 16 MiB by factors of 4, an allgather and a reduce-scatter at every
// other one up to 4 MiB, then a broadcast and a reduce (rings only).
static constexpr size_t kLadderTop = 16u << 20, kLadderGatherTop = 4u << 20;

// Every rank's answer, MIN over comm: the ranks go on together or stop together. false with *err
// set where the agreement itself failed or ran out (NCCLMPI_TIMEOUT: a peer is not here).
static bool all_agree(bool mine, MPI_Comm comm, const std::string &desc, std::string *err)
{
    int all = 0;
    return agree_min_bounded(mine ? 1 : 0, &all, comm, desc, "connecting its NCCL communicator", err) == NM_OK && all != 0;
}

static const char kOwnConnectFailed[] =
    "an NCCL call connecting the communicator's ranks at its creation failed on this rank, and its peers may be inside "
    "theirs, waiting for it";

// The ladder's NCCL calls in order, one per step (each its own NCCL group: grouped calls of one
// kind are sized together); false when step i is past the end.
bool ProcessGroup::connect_step(int i, bool algorithms, bool peers, void *p, ncclResult_t *r)
{
    const size_t n = (size_t)size_;
    int k = 0;  // the steps so far
    for (size_t sz = 4, rung = 0; algorithms && sz <= kLadderTop; sz *= 4, rung++) {
        if (k++ == i) return *r = nccl.ncclAllReduce(p, p, sz / 4, ncclFloat32, ncclSum, nccl_, stream_), true;
        // (a product: what NVLS cannot run, so also the algorithm picked where NVLS would be)
        if (k++ == i) return *r = nccl.ncclAllReduce(p, p, sz / 4, ncclFloat32, ncclProd, nccl_, stream_), true;
        const size_t part = sz / n / 4 * 4;  // each rank's part, whole floats
        if (rung % 2 || sz > kLadderGatherTop || part == 0) continue;
        void *mine = (char *)p + (size_t)rank_ * part;  // (in place)
        if (k++ == i) return *r = nccl.ncclAllGather(mine, p, part, ncclInt8, nccl_, stream_), true;
        if (k++ == i) return *r = nccl.ncclReduceScatter(p, mine, part / 4, ncclFloat32, ncclSum, nccl_, stream_), true;
    }
    if (algorithms && k++ == i) return *r = nccl.ncclBroadcast(p, p, 4, ncclInt8, 0, nccl_, stream_), true;
    if (algorithms && k++ == i) return *r = nccl.ncclReduce(p, p, 1, ncclFloat32, ncclSum, 0, nccl_, stream_), true;
    if (!peers || k++ != i) return false;
    if ((*r = nccl.ncclGroupStart()) != ncclSuccess) return true;  // one byte to and from every peer
    for (int q = 0; q < size_ && *r == ncclSuccess; q++) {
        if (q == rank_) continue;
        *r = nccl.ncclSend((const char *)p + q, 1, ncclInt8, q, nccl_, stream_);
        if (*r == ncclSuccess) *r = nccl.ncclRecv((char *)p + n + q, 1, ncclInt8, q, nccl_, stream_);
    }
    const ncclResult_t e = nccl.ncclGroupEnd();
    if (*r == ncclSuccess) *r = e;
    return true;
}

nm_status_t ProcessGroup::connect(bool algorithms, bool peers, MPI_Comm comm, bool ready)
{
    std::string err;
    if (size_ < 2 || (!algorithms && !peers)) {
        if (all_agree(ready, comm, describe(), &err)) return NM_OK;
        if (!err.empty()) fail(err);
        return err.empty() ? NM_ERR_CUDA : NM_ERR_TIMEOUT;
    }
    std::lock_guard<std::recursive_mutex> use(use_mu_);  // (a later connect: against polls and aborts)
    DeviceGuard g(ctx_);
    const size_t bytes = algorithms ? kLadderTop : 2 * (size_t)size_;
    // The buffer first, agreed: a rank without it makes no NCCL call, so none does (its peers
    // would wait for it inside NCCL). Stream-ordered: no device-wide synchronization at its free.
    CUdeviceptr b = 0;
    if (!all_agree(ready && cu.cuMemAllocAsync(&b, bytes, stream_) == CUDA_SUCCESS, comm, describe(), &err)) {
        if (b) cu.cuMemFreeAsync(b, stream_);
        if (!err.empty()) {
            fail(err);
            return NM_ERR_TIMEOUT;
        }
        NM_WARN(INIT, "%s: connecting the ranks: no device buffer (or not ready) on some rank", describe().c_str());
        return NM_ERR_CUDA;
    }
    // Then each call, agreed before the next: a rank whose call failed stops there, and its peers
    // learn it at once, instead of waiting for it in that call on the GPU or in the next one's
    // connection on the host (NCCL connects an algorithm at its first use, without a timeout).
    // About 30 small allreduces at creation, which takes milliseconds anyway. A rank whose call
    // failed aborts its NCCL communicator before it agrees, which frees its resources; a peer
    // inside its own call, waiting on the host for this rank's side of a connection, stays there
    // (NCCL 2.28.3 on an H100: a peer's abort does not end that wait), which is why the ladder is a
    // fatal wait (kNcclConnectWait; doc/design.md, "NCCL's own waits").
    ncclResult_t r = ncclSuccess;
    bool ok = true;
    for (int i = 0; ok && connect_step(i, algorithms, peers, (void *)b, &r); i++) {
        if (r == ncclSuccess) {
            ok = all_agree(true, comm, describe(), &err);
            continue;
        }
        fail(std::string("connecting the ranks failed here: ") + nccl.ncclGetErrorString(r));
        // a peer may be inside its own call of this step, waiting for this rank's side of a
        // connection, where nothing reaches it: after NCCLMPI_CREATE_GRACE this rank ends the job
        // (0: fatal under NCCLMPI_TIMEOUT only, as the ladder's own wait)
        InnerFatalWait w("Comm_create", kOwnConnectFailed, comm_id_, (double)nm_cfg.CREATE_GRACE);
        ok = all_agree(false, comm, describe(), &err);
    }
    // a peer's calls may wait for this rank's on the GPU: the abort ends them (on every rank,
    // each having seen the same answer) before the stream is waited for
    // (a rank whose own call failed has failed already, above)
    if (!ok) fail(!err.empty() ? err : "connecting the ranks failed on another rank");
    cu.cuMemFreeAsync(b, stream_);
    const bool synced = cu.cuStreamSynchronize(stream_) == CUDA_SUCCESS;
    if (!ok) return NM_ERR_NCCL;
    if (!synced) return NM_ERR_CUDA;
    if (peers) peers_connected_.store(true, std::memory_order_release);
    return NM_OK;
}

bool ProcessGroup::fail(const std::string &why)
{
    std::lock_guard<std::recursive_mutex> use(use_mu_);
    State s = State::READY;
    if (!state_.compare_exchange_strong(s, State::FAILED)) return false;  // already failed (or never ready)
    {
        std::lock_guard<std::mutex> g(mu_);
        fail_reason_ = why;
    }
    NM_ERROR(COLL, "%s: %s; aborting the NCCL communicator", describe().c_str(), why.c_str());
    oneshot_abort(oneshot_);  // one-shot kernels waiting for peers give up
    if (nccl_) {
        DeviceGuard g(ctx_);
        nccl.ncclCommAbort(nccl_);
        nccl_ = nullptr;
    }
    return true;
}

// ---- notices of failure (doc/design.md, "Failures end in errors") ----------------------------
// A rank that fails the group alone sends its reason to every peer (kNoticeTag on the group's
// notice communicator); a peer's wait polls for it about once a millisecond (check_async). The
// sends are never waited for: their buffers are kept until the sends completed.
static constexpr int kNoticeTag = 32001;
static std::mutex outbox_mu;
static std::vector<std::pair<MPI_Request, char *>> outbox;

static void outbox_reap()
{
    for (size_t i = 0; i < outbox.size();) {
        int done = 0;
        PMPI_Test(&outbox[i].first, &done, MPI_STATUS_IGNORE);
        if (!done) {
            i++;
            continue;
        }
        free(outbox[i].second);
        outbox[i] = outbox.back();
        outbox.pop_back();
    }
}

void ProcessGroup::fail_tell(const std::string &why)
{
    if (!fail(why) || notice_ == MPI_COMM_NULL) return;
    std::lock_guard<std::mutex> g(outbox_mu);
    outbox_reap();
    const std::string msg = why.substr(0, 240);
    for (int q = 0; q < size_; q++) {
        if (q == rank_) continue;
        char *b = strdup(msg.c_str());
        MPI_Request r = MPI_REQUEST_NULL;
        if (!b || PMPI_Isend(b, (int)msg.size() + 1, MPI_CHAR, q, kNoticeTag, notice_, &r) != MPI_SUCCESS) {
            free(b);
            continue;
        }
        outbox.emplace_back(r, b);
    }
}

bool ProcessGroup::heard()
{
    int flag = 0, n = 0;
    MPI_Message m;
    MPI_Status st;
    if (PMPI_Improbe(MPI_ANY_SOURCE, kNoticeTag, notice_, &flag, &m, &st) != MPI_SUCCESS || !flag) return false;
    PMPI_Get_count(&st, MPI_CHAR, &n);
    std::vector<char> why((size_t)std::max(n, 1) + 1, 0);
    PMPI_Mrecv(why.data(), n, MPI_CHAR, &m, MPI_STATUS_IGNORE);
    char b[64];
    snprintf(b, sizeof(b), "rank %d of the communicator failed: ", st.MPI_SOURCE);
    fail(b + std::string(why.data()));
    return true;
}

std::string ProcessGroup::fail_reason() const
{
    std::lock_guard<std::mutex> g(mu_);
    return fail_reason_;
}

nm_status_t ProcessGroup::check_async()
{
    if (failed() || (notice_ != MPI_COMM_NULL && heard())) return NM_ERR_NCCL;
    std::unique_lock<std::recursive_mutex> use(use_mu_, std::try_to_lock);
    if (!use.owns_lock()) return NM_OK;  // a launch is using it: poll next time
    if (failed()) return NM_ERR_NCCL;
    ncclResult_t ae = ncclSuccess;
    ncclComm_t c = nccl_;
    if (!c || nccl.ncclCommGetAsyncError(c, &ae) != ncclSuccess) return NM_OK;
    if (ae == ncclSuccess || ae == ncclInProgress) return NM_OK;
    fail(std::string("NCCL asynchronous error: ") + nccl.ncclGetErrorString(ae));
    return NM_ERR_NCCL;
}

CUevent ProcessGroup::event_get()
{
    {
        MtLock<std::mutex> g(mu_);
        if (!events_.empty()) {
            CUevent e = events_.back();
            events_.pop_back();
            return e;
        }
    }
    CUevent e = nullptr;
    DeviceGuard g(ctx_);
    if (cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
    std::lock_guard<std::mutex> l(mu_);
    all_events_.push_back(e);
    return e;
}

void ProcessGroup::event_put(CUevent ev)
{
    if (!ev) return;
    MtLock<std::mutex> g(mu_);
    events_.push_back(ev);
}

CUdeviceptr ProcessGroup::stream_buffer(size_t bytes)
{
    if (bytes <= sbuf_cap_) return sbuf_;
    if (bytes > kStreamBufferMax) return 0;
    if (sbuf_) cu.cuMemFreeAsync(sbuf_, stream_);  // stream-ordered: after its earlier users
    sbuf_cap_ = std::max(bytes, 2 * sbuf_cap_);
    if (cu.cuMemAllocAsync(&sbuf_, sbuf_cap_, stream_) != CUDA_SUCCESS) {
        sbuf_ = 0;
        sbuf_cap_ = 0;
    }
    return sbuf_;
}

void ProcessGroup::destroy()
{
    if (notice_ != MPI_COMM_NULL) {
        int fin = 1;
        PMPI_Finalized(&fin);
        if (!fin) PMPI_Comm_free(&notice_);
        notice_ = MPI_COMM_NULL;
        std::lock_guard<std::mutex> g(outbox_mu);
        if (!fin) outbox_reap();
    }
    if (!ctx_) return;
    if (!cuda_ctx_current(device_)) {  // reset: every handle below is gone (a call naming one may crash)
        nccl_ = nullptr;
        oneshot_ = nullptr;
        sbuf_ = 0;
        sbuf_cap_ = 0;
    } else {
        DeviceGuard g(ctx_);
        if (nccl_) {
            if (failed()) {
                nccl.ncclCommAbort(nccl_);
            } else {
                cu.cuStreamSynchronize(stream_);
                nccl.ncclCommDestroy(nccl_);
            }
            nccl_ = nullptr;
        }
        if (oneshot_) {  // its kernels ended with the group's last operation (or gave up: fail())
            oneshot_release(oneshot_);
            oneshot_ = nullptr;
        }
        for (CUevent e : all_events_) cu.cuEventDestroy(e);
        if (sbuf_) cu.cuMemFreeAsync(sbuf_, stream_);  // (after the stream's last use of it)
        sbuf_ = 0;
        sbuf_cap_ = 0;
        if (stream_) cu.cuStreamDestroy(stream_);
        // a launch that failed may not have written its ticket yet (an aborted NCCL kernel, a
        // timed-out one on the legacy stream): then the GPU may still write here, so the slots stay
        if (flags_ && flags_[0] >= tickets_[0] && flags_[1] >= tickets_[1])
            cu.cuMemFreeHost(const_cast<uint64_t *>(flags_));
    }
    flags_ = nullptr;
    all_events_.clear();
    events_.clear();
    stream_ = nullptr;
    ctx_ = nullptr;
    NM_DEBUG(INIT, "pg%d destroyed", comm_id_);
}

}  // namespace ncclmpi
