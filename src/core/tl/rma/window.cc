// ncclmpi: one-sided communication on windows whose memory is on a GPU (MPI_Win_create with a
// device base), for ranks of one node, through CUDA IPC.
//
// The real MPI is not CUDA-aware: it must never read or write device memory. So the window the
// real MPI creates holds, on a rank whose memory is device memory, an 8-byte host placeholder,
// and ncclmpi moves the data of every call that targets such a rank itself:
//   - MPI_Win_create is collective: every rank publishes (allgather) whether its memory is on a
//     GPU, with a CUDA IPC handle of it; every rank maps every other rank's device memory. Where
//     any rank cannot (another node, no CUDA), all ranks agree on it (allreduce) and the call
//     fails with MPI_ERR_BUFFER on every rank, as before this existed. Each rank's decision
//     (route to ncclmpi or to the real MPI) rests on the published facts: they are the same on
//     every rank, so no two ranks disagree about where a window's data lives.
//   - Put and Get copy between the origin buffer (host or device, any datatype the layout code
//     decodes) and the target's mapped memory, through pinned host memory, and are complete
//     (locally and at the target) when the call returns. Each call is therefore complete at
//     every synchronization the real MPI makes, which keeps its semantics: the unified memory
//     model, where the target sees the data without any call of its own.
//   - Accumulate, Get_accumulate, Fetch_and_op and Compare_and_swap read, combine (the real
//     MPI's MPI_Reduce_local on host copies) and write back the target's elements while holding
//     an exclusive lock of the target on a second, hidden window: accumulations on one target
//     are atomic with respect to each other, as MPI requires.
//   - Synchronization stays the real MPI's (on the placeholder window), with what direct copies
//     need on top: a fence ends with a barrier (a rank's copies in the next epoch must not reach
//     a target still in the previous one); MPI_Win_post tells each origin with a zero-byte
//     message, for which the origin's first copy to that target (or its MPI_Win_complete)
//     waits; a lock is acquired before the first copy (a one-byte get through the real MPI,
//     then a flush: the real MPI may acquire locks lazily); the application's work on the legacy
//     stream finishes before a fence or a post exposes the window.
//   - MPI_Win_get_attr answers the device base and size for such a window.
// Device buffers with a window in host memory (of any flavor) are staged through host shadows
// for the real MPI's call (staged_call); such a window gets its record when a call with a device
// buffer first meets it (adopt).
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "core/cuda/memkind.h"
#include "core/dtype/dense.h"
#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"
#include "core/engine/task.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/watchdog.h"

extern "C" {
int nm_win_state;  // (interpose.h)
}

namespace ncclmpi {
namespace {

enum { TAG_POST = 7 };  // Win_post's notice to each origin (on the window's own communicator)
constexpr size_t MAX_RUNS = 1 << 20;

// What each rank publishes at MPI_Win_create.
struct Published {
    int device;  // 1: the window memory is on a GPU
    int ok;      // 1: this rank could export its memory (or has none on a GPU)
    unsigned long long host;
    MPI_Aint size;
    int disp_unit;
    CUipcMemHandle h;
    size_t off;  // the window's offset in the exported allocation
};

struct Peer {
    bool device = false;
    CUdeviceptr base = 0;  // mapped (or, for this rank, its own) device memory of the window
    CUdeviceptr mapped = 0;  // what cuIpcOpenMemHandle returned (closed at MPI_Win_free)
    MPI_Aint size = 0;
    int disp_unit = 1;
};

struct Win {
    MPI_Win win = MPI_WIN_NULL;   // the real MPI's (the application's handle)
    MPI_Win lock = MPI_WIN_NULL;  // hidden: exclusive locks that make accumulations atomic
    MPI_Comm comm = MPI_COMM_NULL;  // a duplicate of the window's: post notices, fence barriers
    CUcontext ctx = nullptr;
    bool device = false;  // some rank's window memory is on a GPU (else: only origins staged)
    int rank = 0, n = 0;
    void *base = nullptr;  // this rank's, as the application gave it
    MPI_Aint size = 0;
    std::vector<Peer> peer;
    char placeholder[8] = {0};
    char lockbyte[8] = {0};
    std::mutex mu;  // lock_all / forced / posts (threads)
    bool lock_all = false, lock_all_nocheck = false;
    std::vector<char> forced;  // lock_all: the target's lock is known to be held
    std::vector<char> awaiting;  // an access epoch: the target's post notice not received yet
    std::vector<MPI_Request> posts;
    // calls on targets whose window is host memory, with device buffers staged through host
    // shadows: copied back (results) and released when a synchronization completes them
    struct Deferred {
        void *tok;  // nm_stage_local's (null: only `aux`)
        int fn, target;
        std::vector<char> aux;  // Compare_and_swap's compare value from device memory
    };
    std::vector<Deferred> deferred;

    Win(int rank_, int n_, void *base_, MPI_Aint size_)
        : rank(rank_), n(n_), base(base_), size(size_), peer((size_t)n_), forced((size_t)n_, 0), awaiting((size_t)n_, 0)
    {
    }
};

std::mutex wins_mu;
std::map<MPI_Win, Win *> wins;

Win *find(MPI_Win w)
{
    std::lock_guard<std::mutex> g(wins_mu);
    auto it = wins.find(w);
    return it == wins.end() ? nullptr : it->second;
}

// An error through the window's (else the communicator's) error handler, with a message naming
// the call and the reason.
int raise(int fn, int cls, const std::string &why, MPI_Win win, MPI_Comm comm = MPI_COMM_NULL)
{
    char call[64];
    snprintf(call, sizeof(call), "MPI_%s", nm_fn_names[fn]);
    NM_COUNT_ROUTE(fn, NCCLMPI_ROUTE_ERROR);
    return nm_raise_call(call, cls, why.c_str(), comm, MPI_FILE_NULL, win);
}

// Mapped peer allocations, by handle: two windows on one allocation share one mapping.
std::mutex map_mu;
std::map<std::string, std::pair<CUdeviceptr, int>> mapped;

CUdeviceptr map_open(const CUipcMemHandle &h, CUresult *r)
{
    const std::string key((const char *)&h, sizeof(h));
    std::lock_guard<std::mutex> g(map_mu);
    auto it = mapped.find(key);
    if (it != mapped.end()) {
        it->second.second++;
        return it->second.first;
    }
    CUdeviceptr p = 0;
    if ((*r = cu.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS) return 0;
    mapped[key] = {p, 1};
    return p;
}

void map_close(CUdeviceptr p)
{
    std::lock_guard<std::mutex> g(map_mu);
    for (auto it = mapped.begin(); it != mapped.end(); ++it)
        if (it->second.first == p) {
            if (--it->second.second == 0) {
                cu.cuIpcCloseMemHandle(p);
                mapped.erase(it);
            }
            return;
        }
}

// From now on the one-sided calls on w's window come to nm_rma and the synchronizations to
// nm_win_*. Returns the window's record: w, or the one another thread tracked first (w deleted).
Win *track(Win *w)
{
    {
        std::lock_guard<std::mutex> g(wins_mu);
        auto in = wins.emplace(w->win, w);
        if (!in.second) {
            delete w;
            return in.first->second;
        }
    }
    __atomic_or_fetch(&nm_win_state, NM_WIN_TRACKED, __ATOMIC_RELEASE);
    __atomic_store_n(&nm_hot.slow, 1, __ATOMIC_RELEASE);  // data calls leave the host fast path
    return w;
}

// A window the core did not make (MPI_Win_allocate, MPI_Win_allocate_shared,
// MPI_Win_create_dynamic, or MPI_Win_create over host memory on every rank) is host memory on
// every rank. Its record is made at its first call that reaches the core (one with a device
// buffer, or any once the core keeps records), so that device buffers are staged and their
// results come back at the synchronizations that complete the calls. Nothing collective: each
// rank's own affair.
Win *adopt(MPI_Win win)
{
    MPI_Group g;
    int n = 0, me = 0;
    if (PMPI_Win_get_group(win, &g) != MPI_SUCCESS) return nullptr;  // (an invalid handle: the real MPI's error)
    PMPI_Group_size(g, &n);
    PMPI_Group_rank(g, &me);
    PMPI_Group_free(&g);
    Win *w = new Win(me, n, nullptr, 0);
    w->win = win;
    return track(w);  // (or another thread's call adopted it first)
}

void release(Win *w)
{
    bool mapped = false;
    for (const Peer &p : w->peer) mapped |= p.mapped != 0;
    if (mapped) {  // (only then is the driver surely there)
        DeviceGuard g(w->ctx);
        for (Peer &p : w->peer)
            if (p.mapped) map_close(p.mapped);
    }
    delete w;
}

// The context copies run in: the one current, else the window device's (or the first GPU's)
// primary context.
CUcontext context_for(int ordinal)
{
    CUcontext c = nullptr;
    if (cu.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c) return c;
    Device *d = device_get(ordinal >= 0 ? ordinal : 0);
    return d ? d->ctx : nullptr;
}

// Pinned host scratch for one call.
struct Scratch {
    void *p = nullptr;
    size_t got = 0;
    explicit Scratch(size_t bytes) { p = pinned_get(bytes ? bytes : 1, nullptr, &got); }
    ~Scratch()
    {
        if (p) pinned_put(p, got);
    }
};

// The target's elements: its layout and where they start in the target's mapped memory.
struct Target {
    Layout l;
    CUdeviceptr at = 0;
};

// Why the call cannot proceed, or "" (t filled).
std::string target_of(const Win *w, const nm_rma_t *a, Target *t, int *cls)
{
    const Peer &p = w->peer[a->trank];
    const DtypeInfo *d = dtype_info(a->ttype);
    *cls = MPI_ERR_TYPE;
    if (!d) return "invalid target datatype";
    if (a->tcount < 0) {
        *cls = MPI_ERR_COUNT;
        return "negative target count";
    }
    if (!layout_build(a->ttype, a->tcount, MAX_RUNS, &t->l))
        return "the target datatype cannot be decoded for a window in device memory";
    MPI_Aint lo = 0, hi = 0;
    dtype_span(d, 0, a->tcount, &lo, &hi);
    const MPI_Aint off = a->tdisp * (MPI_Aint)p.disp_unit;
    if (t->l.bytes && (off + lo < 0 || off + hi > p.size)) {
        *cls = MPI_ERR_RMA_RANGE;
        return "the target bytes [" + std::to_string(off + lo) + ", " + std::to_string(off + hi) +
               ") are outside rank " + std::to_string(a->trank) + "'s window of " + std::to_string(p.size) + " bytes";
    }
    t->at = p.base + off;
    return "";
}

size_t side_bytes(const Side &s)
{
    const DtypeInfo *d = dtype_info(s.type);
    return d && s.count > 0 ? (size_t)s.count * d->size : 0;
}

// The real MPI's lock of `rank` on `win` is held when this returns: a one-byte get through it
// and a flush (a lock may be acquired lazily, at the first operation).
int hold_lock(MPI_Win win, int rank)
{
    char b;
    int rc = PMPI_Get(&b, 1, MPI_BYTE, rank, 0, 1, MPI_BYTE, win);
    return rc == MPI_SUCCESS ? PMPI_Win_flush(rank, win) : rc;
}

bool fetches(int fn) { return fn == NM_FN_Get_accumulate || fn == NM_FN_Rget_accumulate || fn == NM_FN_Fetch_and_op || fn == NM_FN_Compare_and_swap; }
bool is_get(int fn) { return fn == NM_FN_Get || fn == NM_FN_Rget; }
bool is_put(int fn) { return fn == NM_FN_Put || fn == NM_FN_Rput; }

// Where ranks share a GPU without MPS, a copy within the GPU waits for the other processes' time
// slices (0.14-0.42 ms, route.h nm_p2p_limits); copies through host memory do not. Measured on
// one H200 at 2 ranks: a put through host memory is faster up to about 5 MiB. So there, copies
// between device buffers are direct from k x 2 MiB (k ranks per GPU).
size_t direct_min()
{
    static const size_t min = [] {
        const NodeGpus n = node_gpus();
        const int k = nm_p2p_limits(n.world_size, n.gpus, n.mps, 0, 1, 0, 1).ranks_per_gpu;
        return k > 1 ? (size_t)k * 2 * 1024 * 1024 : 0;
    }();
    return min;
}

// A contiguous device buffer and a contiguous target: one copy between them queued on the legacy
// stream (true), else false (nothing queued: the copies go through pinned host memory).
bool direct(const Side &o, const Target &t, bool put)
{
    const DtypeInfo *d = dtype_info(o.type);
    if (!d || !d->contig || t.l.bytes < direct_min() || t.l.runs.size() != 1 || t.l.runs[0].count != 1 || t.l.runs[0].len != t.l.bytes ||
        !side_is_device(o, d))
        return false;
    const CUdeviceptr at = (CUdeviceptr)((const char *)o.p + d->true_lb), there = t.at + t.l.runs[0].off;
    return cu.cuMemcpyAsync(put ? there : at, put ? at : there, t.l.bytes, CU_STREAM_LEGACY) == CUDA_SUCCESS;
}

// An accumulating call on the target's elements, under the hidden window's exclusive lock.
nm_status_t accumulate(Win *w, const nm_rma_t *a, const Target &t, std::string *why, int *cls)
{
    const size_t bytes = t.l.bytes;
    const DtypeInfo *td = dtype_info(a->ttype);
    const MPI_Datatype basic = td ? td->basic : MPI_DATATYPE_NULL;
    const bool no_op = a->op == MPI_NO_OP, replace = a->op == MPI_REPLACE, cas = a->fn == NM_FN_Compare_and_swap;
    if (basic == MPI_DATATYPE_NULL || !td->basic_size) {
        *cls = MPI_ERR_TYPE;
        *why = "the target datatype is not made of one predefined type";
        return NM_ERR_UNSUPPORTED;
    }
    const Side origin{a->obuf, a->ocount, a->otype};
    if (!no_op && side_bytes(origin) != bytes) {
        *cls = MPI_ERR_TYPE;
        *why = "origin and target data differ in size";
        return NM_ERR_UNSUPPORTED;
    }
    const Side result{a->rbuf, a->rcount, a->rtype};
    if (fetches(a->fn) && side_bytes(result) != bytes) {
        *cls = MPI_ERR_TYPE;
        *why = "result and target data differ in size";
        return NM_ERR_UNSUPPORTED;
    }
    // (the copies in are waited for once, with the target's; the copies out likewise)
    Scratch cur(bytes), in(no_op ? 0 : bytes), cmp(cas ? bytes : 0), old(fetches(a->fn) ? bytes : 0);
    if (!cur.p || !in.p || !cmp.p || !old.p) return NM_ERR_NO_MEM;
    nm_status_t st = NM_OK;
    if (!no_op) st = dense_pack(origin, in.p, bytes, false);
    if (st == NM_OK && cas) st = dense_pack(Side{a->cbuf, 1, a->ttype}, cmp.p, bytes, false);
    int rc = st == NM_OK ? PMPI_Win_lock(MPI_LOCK_EXCLUSIVE, a->trank, 0, w->lock) : MPI_SUCCESS;
    if (st != NM_OK || rc != MPI_SUCCESS) {
        sync_legacy();  // (the queued copies in read the scratch released on return)
        return st != NM_OK ? st : NM_ERR_MPI;
    }
    if ((rc = hold_lock(w->lock, a->trank)) == MPI_SUCCESS) {
        st = layout_pack_dev(t.l, t.at, (CUdeviceptr)cur.p, CU_STREAM_LEGACY);
        if (st == NM_OK) st = sync_legacy();
        if (st == NM_OK && fetches(a->fn)) {  // the old values (their own copy: cur changes next)
            memcpy(old.p, cur.p, bytes);
            st = dense_unpack(old.p, bytes, result, false);
        }
        bool write = !no_op;
        if (st == NM_OK && cas) {
            write = !memcmp(cur.p, cmp.p, bytes);
        } else if (st == NM_OK && !no_op && !replace) {
            const int n = (int)(bytes / td->basic_size);  // cur = in op cur
            if (PMPI_Reduce_local(in.p, cur.p, n, basic, a->op) != MPI_SUCCESS) {
                st = NM_ERR_MPI;
                *cls = MPI_ERR_OP;
                *why = "the operation is not defined on the datatype";
            }
        }
        if (st == NM_OK && write)
            st = layout_unpack_dev(t.l, (CUdeviceptr)(replace || cas ? in.p : cur.p), t.at, CU_STREAM_LEGACY);
        if (st == NM_OK) st = sync_legacy();
    } else {
        st = NM_ERR_MPI;
    }
    if (st != NM_OK) sync_legacy();  // (nothing still queued reads the scratch released below)
    rc = PMPI_Win_unlock(a->trank, w->lock);
    return st != NM_OK ? st : rc == MPI_SUCCESS ? NM_OK : NM_ERR_MPI;
}

// A request that is complete: the calls here complete before they return.
int completed_request(MPI_Request *req)
{
    auto query = [](void *, MPI_Status *s) -> int {
        PMPI_Status_set_elements(s, MPI_BYTE, 0);
        PMPI_Status_set_cancelled(s, 0);
        s->MPI_SOURCE = MPI_UNDEFINED;
        s->MPI_TAG = MPI_UNDEFINED;
        return MPI_SUCCESS;
    };
    auto free_fn = [](void *) -> int { return MPI_SUCCESS; };
    auto cancel = [](void *, int) -> int { return MPI_SUCCESS; };
    int rc = PMPI_Grequest_start(query, free_fn, cancel, nullptr, req);
    return rc == MPI_SUCCESS ? PMPI_Grequest_complete(*req) : rc;
}

// In an access epoch (MPI_Win_start), the first copy to a target whose window is device memory
// waits for the target's MPI_Win_post: its zero-byte notice (MPI_Win_complete takes those still
// due). Held under the window's lock, so that a second thread's copy waits too.
int await_post(Win *w, int t, const char *call)
{
    std::lock_guard<std::mutex> g(w->mu);
    if (!w->awaiting[t]) return MPI_SUCCESS;
    WaitWatch ww(call, "for the matching MPI_Win_post of a target whose window is device memory", true);
    const int rc = PMPI_Recv(nullptr, 0, MPI_BYTE, t, TAG_POST, w->comm, MPI_STATUS_IGNORE);
    w->awaiting[t] = 0;
    return rc;
}

int real_call(const nm_rma_t *a, const void *o, void *res, const void *cmp);

// A call whose target's window is host memory: the real MPI makes it, on host shadows of the
// device buffers (nm_stage_local: copied in after the application's work on the legacy stream).
// A request-based call's results come back when its request completes; the others' when a
// synchronization completes the call (finish_deferred); without device buffers, the real call as
// it is (the buffers are classified once).
int staged_call(Win *w, const nm_rma_t *a, int *rc)
{
    const bool noop = a->op == MPI_NO_OP;
    const int fn = a->fn;
    const bool get = is_get(fn), both = fetches(fn);
    nm_sbuf_t b[2];
    int n = 0;
    if (!get) b[n++] = {a->obuf, noop ? 0 : a->ocount, a->otype, 0};
    if (get || both) b[n++] = {a->rbuf, a->rcount, a->rtype, 1};
    std::vector<char> aux;
    const void *cmp = a->cbuf;
    int ordinal = -1;
    if (fn == NM_FN_Compare_and_swap && nm_mem_device(cmp, &ordinal)) {
        const DtypeInfo *d = dtype_info(a->otype);
        aux.resize(d ? d->size : 0);
        DeviceGuard g(w->ctx ? w->ctx : context_for(ordinal));
        if (aux.empty() || cu.cuMemcpy((CUdeviceptr)aux.data(), (CUdeviceptr)cmp, aux.size()) != CUDA_SUCCESS ||
            sync_legacy() != NM_OK) {
            *rc = raise(fn, MPI_ERR_INTERN, "copying the compare value from device memory failed", a->win);
            return 1;
        }
        cmp = aux.data();
    }
    void *sh[2], *tok = nullptr;
    const int e = nm_stage_local(fn, b, n, 0, MPI_FILE_NULL, w->comm, sh, &tok, nullptr, rc);
    if (e == NM_STAGE_FAILED) return 1;
    if (e == NM_STAGE_HOST && aux.empty()) {  // host buffers, known as such: the real call as it is
        nm_trace_call(fn);
        if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) nm_flush();
        *rc = real_call(a, a->obuf, a->rbuf, a->cbuf);
        return 1;
    }
    MPI_Request *q = a->req;
    const int r = real_call(a, sh[0], sh[n - 1], cmp);
    if (q || r != MPI_SUCCESS) {  // a request's task copies back at its completion; a failure drops the shadows
        *rc = tok ? nm_stage_local_done(fn, tok, r, nullptr, q, MPI_FILE_NULL, w->comm) : r;
        return 1;
    }
    std::lock_guard<std::mutex> g(w->mu);
    w->deferred.push_back(Win::Deferred{tok, fn, a->trank, std::move(aux)});
    *rc = r;
    return 1;
}

// The real MPI's call of a, on origin o, result res and compare value cmp.
int real_call(const nm_rma_t *a, const void *o, void *res, const void *cmp)
{
    MPI_Request *q = a->req;
    int r;
    switch (a->fn) {
    case NM_FN_Put: r = PMPI_Put(o, (int)a->ocount, a->otype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->win); break;
    case NM_FN_Rput: r = PMPI_Rput(o, (int)a->ocount, a->otype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->win, q); break;
    case NM_FN_Get: r = PMPI_Get(res, (int)a->rcount, a->rtype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->win); break;
    case NM_FN_Rget: r = PMPI_Rget(res, (int)a->rcount, a->rtype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->win, q); break;
    case NM_FN_Accumulate:
        r = PMPI_Accumulate(o, (int)a->ocount, a->otype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->op, a->win);
        break;
    case NM_FN_Raccumulate:
        r = PMPI_Raccumulate(o, (int)a->ocount, a->otype, a->trank, a->tdisp, (int)a->tcount, a->ttype, a->op, a->win, q);
        break;
    case NM_FN_Get_accumulate:
        r = PMPI_Get_accumulate(o, (int)a->ocount, a->otype, res, (int)a->rcount, a->rtype, a->trank, a->tdisp,
                                (int)a->tcount, a->ttype, a->op, a->win);
        break;
    case NM_FN_Rget_accumulate:
        r = PMPI_Rget_accumulate(o, (int)a->ocount, a->otype, res, (int)a->rcount, a->rtype, a->trank, a->tdisp,
                                 (int)a->tcount, a->ttype, a->op, a->win, q);
        break;
    case NM_FN_Fetch_and_op: r = PMPI_Fetch_and_op(o, res, a->otype, a->trank, a->tdisp, a->op, a->win); break;
    default: r = PMPI_Compare_and_swap(o, cmp, res, a->otype, a->trank, a->tdisp, a->win); break;
    }
    return r;
}

// After a synchronization that completed this rank's calls on `target` (-1: on every target):
// their results back into device memory, their shadows released.
int finish_deferred(Win *w, int target, int rc)
{
    if (rc != MPI_SUCCESS) return rc;
    std::vector<Win::Deferred> done;
    {
        std::lock_guard<std::mutex> g(w->mu);
        auto keep = w->deferred.begin();
        for (auto it = w->deferred.begin(); it != w->deferred.end(); ++it) {
            if (target < 0 || it->target == target) done.push_back(std::move(*it));
            else *keep++ = std::move(*it);
        }
        w->deferred.erase(keep, w->deferred.end());
    }
    for (Win::Deferred &d : done) {
        const int r = d.tok ? nm_stage_local_done(d.fn, d.tok, MPI_SUCCESS, nullptr, nullptr, MPI_FILE_NULL, w->comm) : MPI_SUCCESS;
        if (r != MPI_SUCCESS && rc == MPI_SUCCESS) rc = r;
    }
    return rc;
}

}  // namespace
}  // namespace ncclmpi

using namespace ncclmpi;

// ---- data calls -------------------------------------------------------------------------------
extern "C" int nm_rma(const nm_rma_t *a, int *rc)
{
    Win *w = find(a->win);
    if (w && a->trank == MPI_PROC_NULL) {  // no data moves: the real MPI's call, device pointers and all
        *rc = real_call(a, a->obuf, a->rbuf, a->cbuf);
        return 1;
    }
    if (!w && a->trank >= 0 && a->win != MPI_WIN_NULL) w = adopt(a->win);
    if (!w || a->trank < 0 || a->trank >= w->n) return 0;  // the real MPI's (or its error)
    if (!cuda_ctx_current()) {  // a device reset (cuda_api.h): nothing made before it is named
        if (a->req) *a->req = MPI_REQUEST_NULL;
        *rc = raise(a->fn, MPI_ERR_OTHER, nm_reset_why, a->win);
        return 1;
    }
    if (!w->peer[a->trank].device) return staged_call(w, a, rc);
    nm_trace_call(a->fn);
    if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) nm_flush();
    int cls = MPI_ERR_OTHER;
    std::string why;
    Target t;
    auto fail = [&](int c, const std::string &reason) {  // (a failed call's request is MPI_REQUEST_NULL)
        if (a->req) *a->req = MPI_REQUEST_NULL;
        *rc = raise(a->fn, c, reason, a->win);
        return 1;
    };
    if (!(why = target_of(w, a, &t, &cls)).empty()) return fail(cls, why);
    if (await_post(w, a->trank, nm_fn_names[a->fn]) != MPI_SUCCESS)
        return fail(MPI_ERR_OTHER, "the real MPI failed the wait for the target's MPI_Win_post");
    DeviceGuard g(w->ctx);
    nm_status_t st = NM_OK;
    {
        std::lock_guard<std::mutex> l(w->mu);  // lock_all: the target's lock held before the first copy
        if (w->lock_all && !w->lock_all_nocheck && !w->forced[a->trank]) {
            if (hold_lock(a->win, a->trank) != MPI_SUCCESS) st = NM_ERR_MPI;
            w->forced[a->trank] = 1;
        }
    }
    const bool put = is_put(a->fn), get = is_get(a->fn);
    if (st == NM_OK && (put || get)) {
        const Side o = put ? Side{a->obuf, a->ocount, a->otype} : Side{a->rbuf, a->rcount, a->rtype};
        if (side_bytes(o) != t.l.bytes) {
            cls = MPI_ERR_TYPE;
            why = "origin and target data differ in size";
            st = NM_ERR_UNSUPPORTED;
        } else if (t.l.bytes && direct(o, t, put)) {
            st = sync_legacy();  // one copy between the GPUs (or within one)
            if (st != NM_OK) why = "a copy through CUDA IPC failed";
        } else if (t.l.bytes) {
            Scratch s(t.l.bytes);
            if (!s.p) {
                st = NM_ERR_NO_MEM;
            } else if (put) {
                st = dense_pack(o, s.p, t.l.bytes);
                if (st == NM_OK) st = layout_unpack_dev(t.l, (CUdeviceptr)s.p, t.at, CU_STREAM_LEGACY);
                if (st == NM_OK) st = sync_legacy();
            } else {
                st = layout_pack_dev(t.l, t.at, (CUdeviceptr)s.p, CU_STREAM_LEGACY);
                if (st == NM_OK) st = sync_legacy();
                if (st == NM_OK) st = dense_unpack(s.p, t.l.bytes, o);
            }
            if (st == NM_ERR_UNSUPPORTED && why.empty()) why = "the origin datatype cannot be decoded for device memory";
        }
    } else if (st == NM_OK) {
        st = accumulate(w, a, t, &why, &cls);
    }
    if (st != NM_OK) {
        if (why.empty()) why = st == NM_ERR_NO_MEM ? "no pinned host memory" : st == NM_ERR_MPI ? "the real MPI failed a lock"
                                                                                      : "a copy through CUDA IPC failed";
        return fail(st == NM_ERR_UNSUPPORTED || st == NM_ERR_MPI ? cls : st == NM_ERR_NO_MEM ? MPI_ERR_NO_MEM : MPI_ERR_INTERN, why);
    }
    NM_COUNT_ROUTE(a->fn, NCCLMPI_ROUTE_IPC);
    *rc = a->req ? completed_request(a->req) : MPI_SUCCESS;
    return 1;
}

// ---- creation and release ---------------------------------------------------------------------
extern "C" int nm_win_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win)
{
    Published mine;
    memset(&mine, 0, sizeof(mine));
    mine.ok = 1;
    mine.size = size;
    mine.disp_unit = disp_unit;
    char hn[256] = "";
    gethostname(hn, sizeof(hn) - 1);
    mine.host = nm_hash_str(hn);
    int ordinal = -1;
    std::string why;
    if (size > 0 && base && (cuda_attached() || nm_linkmap_refresh()) && nm_mem_device(base, &ordinal)) {
        mine.device = 1;
        CUdeviceptr ab = 0;
        size_t asz = 0;
        CUresult r;
        DeviceGuard g(context_for(ordinal));
        if ((r = cu.cuMemGetAddressRange(&ab, &asz, (CUdeviceptr)base)) != CUDA_SUCCESS ||
            (r = cu.cuIpcGetMemHandle(&mine.h, ab)) != CUDA_SUCCESS) {
            mine.ok = 0;
            why = std::string("its device memory cannot be shared through CUDA IPC (") + cuda_errstr(r) + ")";
        }
        mine.off = (size_t)((CUdeviceptr)base - ab);
    }
    int n = 0, me = 0;
    PMPI_Comm_size(comm, &n);
    PMPI_Comm_rank(comm, &me);
    std::vector<Published> all((size_t)n);
    int rc = PMPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) return rc;
    bool any = false;
    for (const Published &p : all) any |= p.device != 0;
    if (!any)  // host memory on every rank: the real MPI's window (device buffers: adopt)
        return PMPI_Win_create(base, size, disp_unit, info, comm, win);

    Win *w = new Win(me, n, base, size);
    int ok = mine.ok;
    for (int q = 0; q < n && ok; q++) {
        if (!all[q].ok) {
            ok = 0;
            why = "rank " + std::to_string(q) + "'s device memory cannot be shared through CUDA IPC";
        } else if (all[q].host != mine.host) {
            ok = 0;
            why = "rank " + std::to_string(q) + " is on another node (device memory in a window works within one node)";
        }
    }
    if (ok && !cuda_attached() && !cuda_load()) {
        ok = 0;
        why = "this rank has no CUDA driver to reach the other ranks' device memory";
    }
    if (ok) {
        w->ctx = context_for(ordinal);
        DeviceGuard g(w->ctx);
        for (int q = 0; q < n && ok; q++) {
            Peer &p = w->peer[q];
            p.size = all[q].size;
            p.disp_unit = all[q].disp_unit;
            if (!(p.device = all[q].device != 0)) continue;
            if (q == me) {
                p.base = (CUdeviceptr)base;
                continue;
            }
            CUresult r = CUDA_SUCCESS;
            if (!(p.mapped = map_open(all[q].h, &r))) {
                ok = 0;
                why = "cannot map rank " + std::to_string(q) + "'s device memory (" + cuda_errstr(r) + ")";
            }
            p.base = p.mapped + all[q].off;
        }
    }
    int all_ok = 0;
    rc = PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS || !all_ok) {
        release(w);
        *win = MPI_WIN_NULL;
        if (rc != MPI_SUCCESS) return rc;
        return raise(NM_FN_Win_create, MPI_ERR_BUFFER,
                     "a window in device memory: " + (ok ? std::string("another rank cannot reach every rank's window") : why),
                     MPI_WIN_NULL, comm);
    }
    // the real MPI's window: this rank's memory, or a host placeholder where it is device memory
    rc = PMPI_Win_create(mine.device ? (void *)w->placeholder : base, mine.device ? (MPI_Aint)sizeof(w->placeholder) : size,
                         disp_unit, info, comm, win);
    if (rc == MPI_SUCCESS) rc = PMPI_Win_create(w->lockbyte, sizeof(w->lockbyte), 1, MPI_INFO_NULL, comm, &w->lock);
    if (rc == MPI_SUCCESS) rc = PMPI_Comm_dup(comm, &w->comm);
    if (rc != MPI_SUCCESS) {
        if (w->lock != MPI_WIN_NULL) PMPI_Win_free(&w->lock);
        if (*win != MPI_WIN_NULL) PMPI_Win_free(win);
        release(w);
        return rc;
    }
    w->win = *win;
    w->device = true;
    track(w);
    NM_DEBUG(CALL, "MPI_Win_create: a window in device memory on %d ranks, mapped through CUDA IPC", n);
    return rc;
}

extern "C" int nm_win_Win_free(MPI_Win *win)
{
    Win *w = win ? find(*win) : nullptr;
    if (!w) return PMPI_Win_free(win);
    {  // (before the real MPI may hand the handle to another window)
        std::lock_guard<std::mutex> g(wins_mu);
        wins.erase(w->win);
    }
    int rc = PMPI_Win_free(win);
    if (rc != MPI_SUCCESS) {
        std::lock_guard<std::mutex> g(wins_mu);
        wins[w->win] = w;
        return rc;
    }
    finish_deferred(w, -1, MPI_SUCCESS);  // (none: every epoch is closed before MPI_Win_free)
    if (w->device) {  // (collective, as MPI_Win_free is: every rank frees both)
        PMPI_Win_free(&w->lock);
        PMPI_Comm_free(&w->comm);
    }
    for (MPI_Request &r : w->posts) PMPI_Request_free(&r);
    release(w);
    return rc;
}

// ---- synchronization --------------------------------------------------------------------------
extern "C" int nm_win_Win_fence(int assert_, MPI_Win win)
{
    Win *w = find(win);
    if (!w) return PMPI_Win_fence(assert_, win);
    if (w->peer[w->rank].device) {  // the application's stores into its window reach the others
        DeviceGuard g(w->ctx);
        if (sync_legacy() != NM_OK) return raise(NM_FN_Win_fence, MPI_ERR_INTERN, "the application's device work failed", win);
    }
    int rc = finish_deferred(w, -1, PMPI_Win_fence(assert_, win));
    if (rc == MPI_SUCCESS && w->device) {
        WaitWatch ww("Win_fence", "for the other ranks of the window's fence", true);
        rc = PMPI_Barrier(w->comm);
    }
    return rc;
}

// The ranks of `group` in the window's communicator.
static std::vector<int> ranks_of(Win *w, MPI_Group group)
{
    MPI_Group wg;
    int n = 0;
    PMPI_Win_get_group(w->win, &wg);
    PMPI_Group_size(group, &n);
    std::vector<int> in((size_t)n), out((size_t)n);
    for (int i = 0; i < n; i++) in[i] = i;
    PMPI_Group_translate_ranks(group, n, in.data(), wg, out.data());
    PMPI_Group_free(&wg);
    return out;
}

extern "C" int nm_win_Win_post(MPI_Group group, int assert_, MPI_Win win)
{
    Win *w = find(win);
    if (!w) return PMPI_Win_post(group, assert_, win);
    if (w->peer[w->rank].device) {
        DeviceGuard g(w->ctx);
        if (sync_legacy() != NM_OK) return raise(NM_FN_Win_post, MPI_ERR_INTERN, "the application's device work failed", win);
    }
    int rc = PMPI_Win_post(group, assert_, win);
    if (rc != MPI_SUCCESS || !w->peer[w->rank].device) return rc;
    std::lock_guard<std::mutex> g(w->mu);
    for (int r : ranks_of(w, group)) {  // each origin may now copy into this rank's memory
        MPI_Request q;
        if (PMPI_Isend(nullptr, 0, MPI_BYTE, r, TAG_POST, w->comm, &q) == MPI_SUCCESS) w->posts.push_back(q);
    }
    return rc;
}

extern "C" int nm_win_Win_start(MPI_Group group, int assert_, MPI_Win win)
{
    Win *w = find(win);
    if (!w) return PMPI_Win_start(group, assert_, win);
    if (!w->device) return PMPI_Win_start(group, assert_, win);
    int rc;
    {  // (Open MPI 5 waits here for the targets' posts, 4.1 at the first copy: await_post)
        WaitWatch ww("Win_start", "for the matching MPI_Win_post of a target whose window is device memory");
        rc = PMPI_Win_start(group, assert_, win);
    }
    if (rc != MPI_SUCCESS) return rc;
    std::lock_guard<std::mutex> g(w->mu);  // (the first copy to each waits for its post)
    for (int r : ranks_of(w, group))
        if (r != MPI_UNDEFINED && w->peer[r].device) w->awaiting[r] = 1;
    return rc;
}

// The post notices are delivered once the exposure epoch ends (every origin started).
static int posts_done(Win *w)
{
    std::lock_guard<std::mutex> g(w->mu);
    int rc = w->posts.empty() ? MPI_SUCCESS : PMPI_Waitall((int)w->posts.size(), w->posts.data(), MPI_STATUSES_IGNORE);
    w->posts.clear();
    return rc;
}

extern "C" int nm_win_Win_wait(MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_wait(win);
    return w && rc == MPI_SUCCESS ? posts_done(w) : rc;
}

extern "C" int nm_win_Win_test(MPI_Win win, int *flag)
{
    Win *w = find(win);
    int rc = PMPI_Win_test(win, flag);
    return w && rc == MPI_SUCCESS && *flag ? posts_done(w) : rc;
}

extern "C" int nm_win_Win_lock(int lock_type, int rank, int assert_, MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_lock(lock_type, rank, assert_, win);
    if (!w || rc != MPI_SUCCESS || rank < 0 || rank >= w->n || !w->peer[rank].device || (assert_ & MPI_MODE_NOCHECK)) return rc;
    return hold_lock(win, rank);
}

extern "C" int nm_win_Win_lock_all(int assert_, MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_lock_all(assert_, win);
    if (!w || rc != MPI_SUCCESS) return rc;
    std::lock_guard<std::mutex> g(w->mu);
    w->lock_all = true;  // each target's lock is made sure of at the first call on it
    w->lock_all_nocheck = (assert_ & MPI_MODE_NOCHECK) != 0;
    w->forced.assign((size_t)w->n, 0);
    return rc;
}

extern "C" int nm_win_Win_unlock_all(MPI_Win win)
{
    Win *w = find(win);
    if (!w) return PMPI_Win_unlock_all(win);
    {
        std::lock_guard<std::mutex> g(w->mu);
        w->lock_all = false;
    }
    return finish_deferred(w, -1, PMPI_Win_unlock_all(win));
}

// The synchronizations that complete this rank's calls: their staged results come back.
extern "C" int nm_win_Win_complete(MPI_Win win)
{
    Win *w = find(win);
    int rc = MPI_SUCCESS;
    for (int t = 0; w && t < w->n && rc == MPI_SUCCESS; t++) rc = await_post(w, t, "Win_complete");
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Win_complete(win);
    return w ? finish_deferred(w, -1, rc) : rc;
}

extern "C" int nm_win_Win_unlock(int rank, MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_unlock(rank, win);
    return w ? finish_deferred(w, rank, rc) : rc;
}

extern "C" int nm_win_Win_flush(int rank, MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_flush(rank, win);
    return w ? finish_deferred(w, rank, rc) : rc;
}

extern "C" int nm_win_Win_flush_local(int rank, MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_flush_local(rank, win);
    return w ? finish_deferred(w, rank, rc) : rc;
}

extern "C" int nm_win_Win_flush_all(MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_flush_all(win);
    return w ? finish_deferred(w, -1, rc) : rc;
}

extern "C" int nm_win_Win_flush_local_all(MPI_Win win)
{
    Win *w = find(win);
    int rc = PMPI_Win_flush_local_all(win);
    return w ? finish_deferred(w, -1, rc) : rc;
}

// ---- attributes -------------------------------------------------------------------------------
extern "C" int nm_win_Win_get_attr(MPI_Win win, int keyval, void *value, int *flag)
{
    int rc = PMPI_Win_get_attr(win, keyval, value, flag);
    Win *w = find(win);
    if (rc != MPI_SUCCESS || !w || !*flag || !w->peer[w->rank].device) return rc;
    if (keyval == MPI_WIN_BASE) *(void **)value = w->base;
    if (keyval == MPI_WIN_SIZE) *(MPI_Aint **)value = &w->size;
    return rc;
}

extern "C" int nm_win_attr_predefined(int keyval)
{
    return keyval == MPI_WIN_BASE || keyval == MPI_WIN_SIZE || keyval == MPI_WIN_DISP_UNIT ||
           keyval == MPI_WIN_CREATE_FLAVOR || keyval == MPI_WIN_MODEL;
}

extern "C" MPI_Aint nm_win_attr_f(int keyval, void *c_value)
{
    if (keyval == MPI_WIN_BASE) return (MPI_Aint)c_value;
    if (keyval == MPI_WIN_SIZE) return *(MPI_Aint *)c_value;
    return *(int *)c_value;  // disp unit, create flavor, memory model
}
