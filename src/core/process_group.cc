// ncclmpi: process groups (NCCL comm + comm stream per MPI communicator and device).
#include "core/process_group.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/task.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

static double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

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
    NM_INFO(INIT, "%s: %s in %.1f ms", describe().c_str(), how, 1e3 * (now_s() - t0));
    return NM_OK;
}

nm_status_t ProcessGroup::init_fresh()
{
    double t0 = now_s();
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
    double t0 = now_s();
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
                if (t0 == 0) t0 = now_s();
                else if (now_s() - t0 > nm_cfg.TIMEOUT) {
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

// ---------------------------------------------------------------------------------------------
// Communicator state
// ---------------------------------------------------------------------------------------------

static std::recursive_mutex states_mu;
static std::vector<CommState *> states;  // live states, in creation order
static std::vector<ProcessGroup *> pg_order;  // live groups, in creation order
static int comm_keyval = MPI_KEYVAL_INVALID;
static int next_id;
static uint64_t comm_gen = 1;  // bumped whenever a state dies: invalidates the thread caches
static thread_local struct {
    MPI_Comm comm;
    CommState *cs;
    uint64_t gen;
} comm_cache;

static void forget_groups(CommState *cs)
{
    for (auto &kv : cs->pgs) {
        if (!kv.second) continue;
        pg_order.erase(std::remove(pg_order.begin(), pg_order.end(), kv.second.get()), pg_order.end());
    }
}

static int comm_delete_fn(MPI_Comm, int, void *val, void *)
{
    tasks_drain();  // nothing may still run on the groups we are about to destroy
    std::lock_guard<std::recursive_mutex> g(states_mu);
    CommState *cs = static_cast<CommState *>(val);
    __atomic_add_fetch(&comm_gen, 1, __ATOMIC_RELEASE);
    forget_groups(cs);
    states.erase(std::remove(states.begin(), states.end(), cs), states.end());
    delete cs;  // ProcessGroup destructors drain and destroy their NCCL comms
    return MPI_SUCCESS;
}

int world_rank()
{
    int r = -1, init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    if (init && !fin) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

CommState *comm_state(MPI_Comm comm)
{
    uint64_t gen = __atomic_load_n(&comm_gen, __ATOMIC_ACQUIRE);
    if (comm_cache.comm == comm && comm_cache.gen == gen && comm_cache.cs) return comm_cache.cs;
    CommState *cs = comm_state_lookup(comm);
    comm_cache.comm = comm;
    comm_cache.cs = cs;
    comm_cache.gen = gen;
    return cs;
}

CommState *comm_state_lookup(MPI_Comm comm)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    if (comm_keyval == MPI_KEYVAL_INVALID)
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete_fn, &comm_keyval, nullptr);
    void *val = nullptr;
    int found = 0;
    PMPI_Comm_get_attr(comm, comm_keyval, &val, &found);
    if (found) return static_cast<CommState *>(val);
    CommState *cs = new CommState;
    cs->comm = comm;
    cs->id = next_id++;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    cs->inter = inter != 0;
    PMPI_Comm_rank(comm, &cs->rank);
    PMPI_Comm_size(comm, &cs->size);
    cs->remote_size = cs->size;
    if (cs->inter) PMPI_Comm_remote_size(comm, &cs->remote_size);
    PMPI_Comm_set_attr(comm, comm_keyval, cs);
    states.push_back(cs);
    return cs;
}

std::string CommState::describe() const
{
    char b[96];
    snprintf(b, sizeof(b), "comm%d{rank %d/%d%s}", id, rank, size, inter ? ", inter" : "");
    return b;
}

// Every rank must have a GPU and no two ranks may share one; all ranks learn the same answer.
static bool distinct_gpus(const CommState &cs, int device)
{
    struct Entry {
        int ok;
        CUuuid uuid;
    } mine;
    memset(&mine, 0, sizeof(mine));
    CUdevice dev;
    mine.ok = device >= 0 && cu.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
              cu.cuDeviceGetUuid(&mine.uuid, dev) == CUDA_SUCCESS;
    std::vector<Entry> all(cs.size);
    PMPI_Allgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE, cs.comm);
    for (int i = 0; i < cs.size; i++) {
        if (!all[i].ok) {
            NM_INFO(INIT, "%s: rank %d has no usable GPU: staged path", cs.describe().c_str(), i);
            return false;
        }
        for (int j = 0; j < i; j++)
            if (!memcmp(&all[i].uuid, &all[j].uuid, sizeof(CUuuid))) {
                NM_INFO(INIT, "%s: ranks %d and %d share a GPU: staged path (NCCL needs one GPU per rank)",
                        cs.describe().c_str(), j, i);
                return false;
            }
    }
    return true;
}

ProcessGroup *CommState::group(int device, nm_status_t *st)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    *st = NM_OK;
    if (inter) return nullptr;
    auto it = pgs.find(device);
    if (it != pgs.end()) {
        ProcessGroup *pg = it->second.get();
        return pg && pg->state() == ProcessGroup::State::READY ? pg : nullptr;
    }
    // First device use of this communicator on this device: collective on every rank.
    std::unique_ptr<ProcessGroup> pg;
    if (distinct_gpus(*this, device)) {
        pg.reset(new ProcessGroup(comm, id, device, rank, size));
        int ok = pg->init_fresh() == NM_OK, all_ok = 0;
        PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
        if (!all_ok) {
            if (ok) NM_WARN(INIT, "%s: NCCL init failed on another rank: staged path", describe().c_str());
            pg.reset();
        }
    }
    ProcessGroup *p = pg.get();
    if (p) pg_order.push_back(p);
    pgs[device] = std::move(pg);
    nccl_ok = p ? 1 : 0;
    return p;
}

// Device for NCCLMPI_EAGER: the current context's, else local rank modulo the device count.
static int eager_device(MPI_Comm comm)
{
    int lrank = 0, n = 0;
    MPI_Comm node;  // collective: every member computes its node-local rank first
    PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    PMPI_Comm_rank(node, &lrank);
    PMPI_Comm_free(&node);
    CUcontext ctx = nullptr;
    CUdevice d;
    if (!cuda_attached()) return -1;
    if (cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && cu.cuCtxGetDevice(&d) == CUDA_SUCCESS) return (int)d;
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return -1;
    return lrank % n;
}

void comm_state_created(MPI_Comm parent, MPI_Comm child)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    CommState *ps = nullptr;
    if (comm_keyval != MPI_KEYVAL_INVALID && parent != MPI_COMM_NULL) {
        void *val = nullptr;
        int found = 0;
        PMPI_Comm_get_attr(parent, comm_keyval, &val, &found);
        if (found) ps = static_cast<CommState *>(val);
    }
    bool split = false;
    if (ps && nm_cfg.SPLIT && nccl.ncclCommSplit) {
        for (auto &kv : ps->pgs) {
            ProcessGroup *ppg = kv.second.get();
            if (!ppg || ppg->state() != ProcessGroup::State::READY) continue;
            split = true;
            CommState *cs = child != MPI_COMM_NULL ? comm_state(child) : nullptr;
            int color = NCCL_SPLIT_NOCOLOR, key = 0;
            if (cs) {
                // color: the parent rank of the child's rank 0 (same on every member)
                MPI_Group pgp, cgp;
                int zero = 0;
                PMPI_Comm_group(parent, &pgp);
                PMPI_Comm_group(child, &cgp);
                PMPI_Group_translate_ranks(cgp, 1, &zero, pgp, &color);
                PMPI_Group_free(&pgp);
                PMPI_Group_free(&cgp);
                key = cs->rank;
            }
            std::unique_ptr<ProcessGroup> pg;
            int ok = 1, all_ok = 0;
            if (cs && !cs->inter) {
                pg.reset(new ProcessGroup(child, cs->id, kv.first, cs->rank, cs->size));
                ok = pg->init_split(*ppg, color, key) == NM_OK;
            } else if (!cs) {
                ncclComm_t none = nullptr;
                ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
                cfg.splitShare = 1;
                DeviceGuard dg(ppg->ctx());
                ok = nccl.ncclCommSplit(ppg->nccl_comm(), NCCL_SPLIT_NOCOLOR, 0, &none, &cfg) == ncclSuccess;
            }
            PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, parent);
            if (cs && !cs->inter) {
                if (all_ok) {
                    pg_order.push_back(pg.get());
                    cs->pgs[kv.first] = std::move(pg);
                    cs->nccl_ok = 1;
                } else {
                    NM_WARN(INIT, "%s: ncclCommSplit failed on some rank; NCCL comm made at first use instead",
                            cs->describe().c_str());
                }
            }
        }
    }
    if (!split && nm_cfg.EAGER && child != MPI_COMM_NULL) {
        int dev = eager_device(child);
        // every member must take part, also those without a current device
        int have = dev >= 0, all_have = 0;
        PMPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, child);
        if (all_have) {
            nm_status_t st;
            comm_state(child)->group(dev, &st);
        } else {
            NM_INFO(INIT, "NCCLMPI_EAGER: a rank has no current CUDA device; NCCL comm made at first use");
        }
    }
}

void comm_states_teardown()
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    // children (created later) before parents: split comms share their parent's resources
    for (auto it = pg_order.rbegin(); it != pg_order.rend(); ++it) (*it)->destroy();
    pg_order.clear();
    for (CommState *cs : states) {
        cs->pgs.clear();
        cs->nccl_ok = -1;
    }
}

}  // namespace ncclmpi
