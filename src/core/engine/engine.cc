// ncclmpi: the execution engine (see engine.h; the argument is in doc/design.md, "Coalescing").
#include "core/engine/engine.h"
#include "core/engine/deadline.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <vector>

#include "core/comm/comm_state.h"
#include "core/comm/side_cache.h"
#include "core/engine/task.h"
#include "core/nvtx.h"
#include "core/op_table.h"
#include "core/tl/nccl/coll_nccl.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

int nm_thread_multiple;
int nm_thread_single;

// ---- pools -----------------------------------------------------------------------------------
static FreeList<Op> op_pool;

Op *op_get() { return op_pool.get(); }

void Op::reset()
{
    o = nm_op_t{};
    rank = 0;
    size = n = 1;
    root = inplace = false;
    sd = rd = DtypeInfo{};
    has_sd = has_rd = false;
    sdup = rdup = MPI_DATATYPE_NULL;
    skind = rkind = NM_MEM_DEVICE;
    act = 0;
    cs = nullptr;
    seq = 0;
    order_ev = nullptr;
    task = nullptr;
    explicit_group = false;
    enq_stream = nullptr;
    oneshot = false;
    kdone = nullptr;
    kdone_ticket = 0;
    t_launch = 0;
    post_first.clear();
    post.clear();
    layouts.clear();
    packed.clear();
    zeros.clear();
    scratch.clear();
    bounce.clear();
    carrier = MPI_REQUEST_NULL;
    done = nullptr;
    launched.store(false, std::memory_order_relaxed);
}

void op_put(Op *op)
{
    if (op->sdup != MPI_DATATYPE_NULL) PMPI_Type_free(&op->sdup);
    if (op->rdup != MPI_DATATYPE_NULL) PMPI_Type_free(&op->rdup);
    op->reset();
    op_pool.put(op);
}

std::string Op::describe() const
{
    char b[200];
    snprintf(b, sizeof(b), "MPI_%s on %s seq %llu", nm_fn_names[o.fn], cs ? cs->describe().c_str() : "?",
             (unsigned long long)seq);
    return b;
}

// One completion event per launch, shared by its ops.
// Its ops learn the outcome from one event query: once complete it is not queried again, and a
// sweep over the pending tasks queries it once while it is not (see op_poll).
struct Completion {
    CUevent ev = nullptr;                     // without flags
    const volatile uint64_t *flag = nullptr;  // complete once *flag >= ticket
    uint64_t ticket = 0;
    bool legacy = false;                      // complete once the legacy stream is (launch(): by_stream)
    ProcessGroup *pg = nullptr;
    std::atomic<int> refs{0};
    std::atomic<bool> complete{false};
    std::atomic<uint64_t> notready_sweep{0};  // the last sweep that found it not complete
    std::atomic<double> async_checked{0};     // when NCCL's asynchronous error was last polled
};
static FreeList<Completion> done_pool;

static Completion *completion_get(ProcessGroup *pg, int refs)
{
    Completion *d = done_pool.get();
    d->ev = nullptr;
    d->flag = nullptr;
    d->ticket = 0;
    d->legacy = false;
    d->pg = pg;
    d->refs.store(refs, std::memory_order_relaxed);
    d->complete.store(false, std::memory_order_relaxed);
    d->notready_sweep.store(0, std::memory_order_relaxed);
    d->async_checked.store(0, std::memory_order_relaxed);
    return d;
}

static void completion_put(Completion *d)
{
    d->pg->event_put(d->ev);
    done_pool.put(d);
}

static void completion_drop(Completion *d)
{
    if (d->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) completion_put(d);
}

// operations launched on any NCCL communicator of this process and not yet finished
static std::atomic<long> inflight_total{0};
long engine_inflight() { return inflight_total.load(std::memory_order_acquire); }

// ---- MPI progress ----------------------------------------------------------------------------
void mpi_progress()
{
    int flag = 0;
    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

// ---- fault injection (NCCLMPI_FAULT=<world rank>:<n>: the n-th launch fails) -----------------
static std::atomic<long> launches{0};

static bool fault_now()
{
    // (a function-local static: once set, one load per launch; std::call_once costs thread-local
    // accesses through __tls_get_addr at every call)
    static const long fault_at = [] {
        int r = -1;
        long n = -1;
        if (nm_cfg.FAULT && *nm_cfg.FAULT && sscanf(nm_cfg.FAULT, "%d:%ld", &r, &n) == 2 && r == world_rank() && n > 0)
            return n;
        return -1L;
    }();
    return fault_at > 0 && launches.fetch_add(1) + 1 == fault_at;
}

// ---- launch ----------------------------------------------------------------------------------
static CUstream pick_stream(ProcessGroup *pg, bool blocking)
{
    if (blocking && nm_cfg.CALC_STREAM && !nm_thread_multiple && pg->inflight.load(std::memory_order_relaxed) == 0)
        return CU_STREAM_LEGACY;
    return pg->stream();
}

// A launch that failed on this rank: the peers launched all of it and wait for this rank's part
// inside NCCL (or will, at their next operation on it), so this rank is out of step with them on
// this NCCL communicator for good. Abort it and tell the peers (process_group.h, fail_tell: each
// fails it too at its next poll, with the same error class), then let the stream's queued copies
// finish before their buffers go back to the pools. doc/design.md, "Failures end in errors".
static void launch_failed(CommState *cs, ProcessGroup *pg, Op *const *ops, int n, CUstream s, const std::string &err)
{
    pg->fail_tell(err + " at " + ops[0]->describe());
    cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
    cu.cuStreamSynchronize(s);
    for (int i = 0; i < n; i++) op_release_resources(*ops[i], s);
}

// 1 for a MAX reduction that NCCL runs, 2 for a MIN one, else 0 (route.h, "MAX and MIN")
static unsigned minmax_of(const Op *op)
{
    if (!(nm_opk(op->o.kind) & NM_KF_RED) || op->oneshot) return 0;
    const int nop = nm_map_op(op->o.op);
    return nop == ncclMax ? 1u : nop == ncclMin ? 2u : 0u;
}

// ops[b, e) of a launch of n as one NCCL group on s (none where all of them run as one-shot
// kernels), their small allreduces sharing NCCL calls (fuse.h). Every body runs first (scratch,
// packs, one-shot kernels), recording its NCCL calls; the group is opened only once all of them
// succeeded, so a local failure makes no NCCL call of the group at all (the caller tells the
// peers). (Inlined: a call costs a blocking allreduce 40 more instructions,
// bench/device_overhead.sh.)
static inline __attribute__((always_inline)) nm_status_t nccl_group(Op *const *ops, int b, int e, int n, ProcessGroup &pg, CUstream s,
                                                                   std::string *err)
{
    bool any_nccl = false;
    for (int i = b; i < e; i++) any_nccl |= !ops[i]->oneshot;
    // small allreduces of the group share NCCL calls (fuse.h), planned from what every rank shares
    // (the group's ops and their order are agreed, and so is each one's one-shot choice)
    // (the thread's plan is reached only for groups of several: a dynamically initialised
    // thread-local costs a TLS lookup call wherever control passes its declaration)
    Fusion *fusion = nullptr;
    if (any_nccl && e - b > 1) {
        static thread_local Fusion plan;
        if (plan.plan(ops + b, e - b, pg.size())) fusion = &plan;
    }
    const bool fused = fusion != nullptr;
    nm_status_t st = NM_OK;
    std::vector<NcclRec> &recs = pg.recs;
    recs.clear();
    for (int i = b; i < e && st == NM_OK; i++) {
        NcclCall c(*ops[i], pg, s, n == 1, &recs);
        if (fused) c.fuse = fusion->slot(i - b);
        st = op_row(ops[i]->o.kind).nccl(c);
        if (st == NM_OK) st = c.st;
        if (st != NM_OK) *err = ops[i]->describe() + ": " + nm_status_str(st);
    }
    if (fused && st == NM_OK && (st = fusion->prepare(ops + b, pg, s, &recs)) != NM_OK)
        *err = std::string("fused allreduces: ") + nm_status_str(st);
    if (st != NM_OK || !any_nccl) return st;
    // one NCCL call: NCCL makes it a group of its own (no group of ours around it, as an
    // application calling NCCL once would do: 0.1 us less per blocking call)
    const bool single = recs.size() == 1 && !fused;
    if (!single) NM_NCCL_CHECK(nccl.ncclGroupStart(), { *err = "ncclGroupStart failed"; return NM_ERR_NCCL; });
    const ncclResult_t ie = nccl_issue(recs.data(), recs.size(), pg.nccl_comm(), s);
    const ncclResult_t ge = single ? ncclSuccess : nccl.ncclGroupEnd();
    const ncclResult_t r = ie != ncclSuccess ? ie : ge;
    if (r != ncclSuccess && r != ncclInProgress) {
        *err = std::string(ie != ncclSuccess ? "an NCCL call of the group: " : "ncclGroupEnd: ") + nccl.ncclGetErrorString(r) + " (" +
               nccl.ncclGetLastError(pg.nccl_comm()) + ")";
        return NM_ERR_NCCL;
    }
    if (fused && (st = fusion->unpack(pg, s)) != NM_OK) *err = "fused allreduces: unpacking failed";
    return st;
}

// Order a launch on s: after this communicator's launches on another stream still in flight,
// and after the application's work (the last op's recorded point covers the earlier ones; an
// enqueued op is on the application's own stream: in its order already).
static nm_status_t launch_order(ProcessGroup *pg, Op *const *ops, int n, CUstream s, std::string *err)
{
    if (pg->last_stream && pg->last_stream != s && pg->inflight.load(std::memory_order_relaxed) > 0) {
        CUevent prev = pg->event_get();
        NM_CU_CHECK(prev ? cu.cuEventRecord(prev, pg->last_stream) : CUDA_ERROR_OUT_OF_MEMORY, goto failed);
        NM_CU_CHECK(cu.cuStreamWaitEvent(s, prev, 0), goto failed);
        pg->event_put(prev);
    }
    pg->last_stream = s;
    if (s != CU_STREAM_LEGACY && nm_cfg.STREAM_ORDER && !ops[n - 1]->enqueued()) {
        CUevent ord = ops[n - 1]->order_ev;
        CUevent tmp = nullptr;
        if (!ord) {
            tmp = ord = pg->event_get();
            NM_CU_CHECK(ord ? cu.cuEventRecord(ord, CU_STREAM_LEGACY) : CUDA_ERROR_OUT_OF_MEMORY, goto failed);
        }
        NM_CU_CHECK(cu.cuStreamWaitEvent(s, ord, 0), goto failed);
        if (tmp) pg->event_put(tmp);  // reuse is safe: the wait captured the recorded work
    }
    return NM_OK;
failed:
    *err = "cannot order the launch after earlier work (an event)";
    return NM_ERR_CUDA;
}

// Whether a launch's completion is seen by querying its stream, without a marker of its own (a
// flag write or an event record, 0.2-0.4 us of host time each): a blocking call's one op on the
// legacy stream (pick_stream: nothing of the communicator in flight) at MPI_THREAD_SINGLE. Its
// caller waits for it at once (engine_run_blocking), and nothing else can queue work behind it
// meanwhile: the standard's MPI_THREAD_SINGLE has no other thread in the process, and the wait
// itself queues no device work (op_poll, mpi_progress). So the stream is idle exactly when the op
// and the application's earlier work on it are done, and the op follows that work anyway.
static inline bool by_stream(CUstream s, int n)
{
    return s == CU_STREAM_LEGACY && n == 1 && nm_thread_single && nm_cfg.STREAM_QUERY;
}

// Launch ops (all of one communicator, cs->mu held) as one NCCL group on stream s. A failure
// fails the communicator on every rank (launch_failed): NM_ERR_NCCL, MPI_ERR_OTHER everywhere.
static nm_status_t launch(CommState *cs, Op *const *ops, int n, CUstream s, std::string *err)
{
    ProcessGroup *pg = cs->pg.get();
    if (!pg) {
        *err = "no NCCL communicator";
        return NM_ERR_NCCL;
    }
    MtLock<std::recursive_mutex> use(pg->use_mu());  // the abort waits for this launch (threads)
    if (pg->failed()) {
        *err = pg->fail_reason();
        return NM_ERR_NCCL;
    }
    DeviceGuard g(pg->ctx());
    NvtxStage sg_order(stage::kOrder);
    nm_status_t st = launch_order(pg, ops, n, s, err);
    sg_order.end();
    if (st == NM_OK && fault_now()) {
        *err = "NCCLMPI_FAULT: injected NCCL failure";
        st = NM_ERR_NCCL;
    }
    char range[96];
    range[0] = 0;
    if (nm_cfg.NVTX == 1) snprintf(range, sizeof(range), "ncclmpi: NCCL group of %d on comm%d", n, cs->id);
    NvtxRange nvtx(range);
    // In a group of several, ops NCCL can run go to NCCL (route.h, nm_oneshot_keeps). The one-shot
    // kernels left launch at their op inside the group (on every rank in the same order, before
    // the group's NCCL kernels); a group of one-shot ops only needs no NCCL group at all.
    for (int i = 0; i < n && n > 1; i++)
        if (ops[i]->oneshot && !nm_oneshot_keeps(n, (nm_opk(ops[i]->o.kind) & NM_KF_RED) != 0, ops[i]->rd.nccl_type != NM_UNSUPPORTED,
                                                 nm_map_op(ops[i]->o.op) != NM_UNSUPPORTED))
            ops[i]->oneshot = false;
    // one NCCL group; two where NCCL would mix up a MAX and a MIN reduction (route.h): every op
    // but the MIN reductions, then those (issue order within each; every rank sorts alike)
    unsigned mm = 0;
    if (n > 1 && nm_minmax_hazard(nccl.version, pg->size()))
        for (int i = 0; i < n; i++) mm |= minmax_of(ops[i]);
    NvtxStage sg_issue(stage::kLaunch);
    if (st == NM_OK && mm != 3u) {
        st = nccl_group(ops, 0, n, n, *pg, s, err);
    } else if (st == NM_OK) {
        static thread_local std::vector<Op *> sorted;
        sorted.clear();
        for (int i = 0; i < n; i++)
            if (minmax_of(ops[i]) != 2u) sorted.push_back(ops[i]);
        const int first = (int)sorted.size();
        for (int i = 0; i < n; i++)
            if (minmax_of(ops[i]) == 2u) sorted.push_back(ops[i]);
        st = nccl_group(sorted.data(), 0, first, n, *pg, s, err);
        if (st == NM_OK) st = nccl_group(sorted.data(), first, n, n, *pg, s, err);
    }
    for (int i = 0; i < n && st == NM_OK; i++) st = op_post_stream(*ops[i], s);
    sg_issue.end();
    NvtxStage sg_mark(stage::kMark);
    Completion *d = nullptr;
    if (st == NM_OK) {
        d = completion_get(pg, n);
        const bool batched = ops[n - 1]->enqueued();
        if (batched) {
            // no marker per op: enqueued ops are marked in batches (engine_run_enqueued), and
            // nothing polls their own completion (op_poll: tasks and blocking calls only)
        } else if (n == 1 && ops[0]->kdone) {  // written by the op's kernel (one-shot)
            d->flag = ops[0]->kdone;
            d->ticket = ops[0]->kdone_ticket;
        } else if (by_stream(s, n)) {
            d->legacy = true;  // no marker: the legacy stream's own state
        } else {
            d->flag = pg->flag_write(s, &d->ticket);
        }
        if (!batched && !d->flag && !d->legacy && (!(d->ev = pg->event_get()) || cu.cuEventRecord(d->ev, s) != CUDA_SUCCESS)) {
            *err = "cannot record the completion event";
            st = NM_ERR_CUDA;
            completion_put(d);
        }
    }
    sg_mark.end();
    if (st != NM_OK) {
        if (err->empty()) *err = std::string("launch failed: ") + nm_status_str(st);
        launch_failed(cs, pg, ops, n, s, *err);
        return NM_ERR_NCCL;
    }
    double now = nm_now_s();
    NM_TRACE(COLL, "%s: launching a group of %d (first %s)", cs->describe().c_str(), n, ops[0]->describe().c_str());
    pg->inflight.fetch_add(n, std::memory_order_relaxed);
    inflight_total.fetch_add(n, std::memory_order_relaxed);
    for (int i = 0; i < n; i++) {
        Op *op = ops[i];
        for (CUdeviceptr p : op->scratch) cu.cuMemFreeAsync(p, s);  // stream-ordered: after its users
        op->scratch.clear();
        if (op->order_ev) {
            pg->event_put(op->order_ev);
            op->order_ev = nullptr;
        }
        op->done = d;
        op->t_launch = now;
        op->launched.store(true, std::memory_order_release);  // last: pollers may take it from here
    }
    return st;
}

static void fail_ops(Op *const *ops, int n, nm_status_t st, const std::string &err)
{
    for (int i = 0; i < n; i++)
        if (ops[i]->task) ops[i]->task->fail_op(st, err);
}

// ---- agreement rounds ------------------------------------------------------------------------
static Round *round_start(CommState *cs, int proposal)
{
    Round *r = new Round;
    r->proposal = proposal;
    r->t0 = nm_now_s();
    PMPI_Iallreduce(&r->proposal, &r->result, 1, MPI_INT, MPI_MIN, cs->hidden, &r->req);
    return r;
}

// Rounds nobody waits for any more (a failed wait, a freed communicator), completed in the
// background; with the hidden duplicate they ran on when its communicator was freed, released once
// they completed (Open MPI's libnbc may still progress a round on a communicator freed under it).
struct Background {
    MPI_Comm hidden;  // to free after the rounds, or MPI_COMM_NULL
    std::vector<Round *> rounds;
};
static std::mutex background_mu;
static std::vector<Background> background;
// background's and orphan_carriers' entries (below), read without their locks: most progress
// calls find neither
static std::atomic<int> leftovers{0};

static void to_background(MPI_Comm hidden, std::vector<Round *> rounds)
{
    std::lock_guard<std::mutex> g(background_mu);
    background.push_back(Background{hidden, std::move(rounds)});
    leftovers.fetch_add(1, std::memory_order_relaxed);
}

static void rounds_reap(std::vector<Round *> &v)
{
    for (size_t i = 0; i < v.size();) {
        int flag = 0;
        PMPI_Test(&v[i]->req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            delete v[i];
            v[i] = v.back();
            v.pop_back();
        } else {
            i++;
        }
    }
}

// MPI_Finalize: every round of v waited for (each rank started the same ones and is here), with
// NCCLMPI_TIMEOUT from now; v emptied. false when one did not complete (left in flight, logged).
// failed: the communicator failed, on a peer's notice or its own failure, so a peer may never
// have started the rounds: none is waited for (each is left in flight to the real MPI_Finalize),
// nor is one abandoned for that reason.
static bool rounds_complete(std::vector<Round *> &v, const char *whose, bool failed = false)
{
    const Deadline d;
    bool all = true;
    for (Round *r : v) {
        int flag = 0;
        if (failed || r->abandoned) {
            PMPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
            if (flag) delete r;  // (else left in flight: its request cannot be freed)
            continue;
        }
        for (unsigned spin = 0; !flag; spin++) {
            PMPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
            if (flag || (spin & 255) != 255) continue;
            if (d.passed(nm_now_s())) break;
            sched_yield();
        }
        if (flag) {
            delete r;
        } else if (all) {
            all = false;
            NM_WARN(COLL, "MPI_Finalize: %s", Deadline::expired(std::string(whose) + " agreement round in flight").c_str());
        }
    }
    v.clear();
    return all;
}

static void queue_pop(CommState *cs, int m)
{
    cs->queue.erase(cs->queue.begin(), cs->queue.begin() + m);
    __atomic_sub_fetch(&nm_hot.queued, m, __ATOMIC_RELAXED);
}

// Launch the front m ops of cs's queue as one group (cs->mu held).
static void launch_front(CommState *cs, int m)
{
    std::vector<Op *> ops(cs->queue.begin(), cs->queue.begin() + m);
    queue_pop(cs, m);
    std::string err;
    nm_status_t st = launch(cs, ops.data(), m, cs->pg ? cs->pg->stream() : nullptr, &err);
    if (st != NM_OK) fail_ops(ops.data(), m, st, err);
}

// Every queued op of cs as a group of its own: the proposals are 1, so the result is 1 whatever
// the peers propose, and nothing waits.
static void flush_singletons(CommState *cs)
{
    while (!cs->queue.empty()) {
        cs->rounds.push_back(round_start(cs, 1));
        launch_front(cs, 1);
    }
    rounds_reap(cs->rounds);
}

// cs->mu, taken for a communicator's queue under MPI_THREAD_MULTIPLE. A flush that found it held
// (engine_flush_all) asks the holder to launch the queue as singletons before it lets go: the
// holder may be a thread that only appends, so the request must not be lost.
class QueueLock {
  public:
    explicit QueueLock(CommState *cs) : cs_(cs), g_(cs->mu) {}
    ~QueueLock()
    {
        if (cs_->flush_req.exchange(false, std::memory_order_acq_rel) && !cs_->queue.empty()) flush_singletons(cs_);
    }

  private:
    CommState *cs_;
    MtLock<std::mutex> g_;  // below MPI_THREAD_MULTIPLE no other thread is in ncclmpi
};

// Wait for a round, keeping MPI moving; NCCLMPI_TIMEOUT bounds it, and a peer's notice that it
// failed the communicator (process_group.h, fail_tell) ends it about a millisecond after it
// arrives: that peer fails its later operations without proposing, so the round may never
// complete (the round is abandoned). what: the round's purpose, for the messages.
static nm_status_t round_wait(CommState *cs, Round *r, std::string *err,
                              const char *what = "the agreement on the next group of nonblocking operations")
{
    bool warned = false;
    double heard_at = r->t0;
    for (unsigned spin = 0;; spin++) {
        int flag = 0;
        PMPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
        if (flag) return NM_OK;
        if ((spin & 255) == 255) {
            const double now = nm_now_s(), waited = now - r->t0;
            if (cs->pg && now - heard_at >= 1e-3) {
                heard_at = now;
                if (cs->pg->check_async() != NM_OK) {
                    *err = cs->describe() + ": " + what + ": " + cs->pg->fail_reason();
                    cs->cap.store(NM_CAP_FAILED);
                    r->abandoned = true;
                    return NM_ERR_NCCL;
                }
            }
            if (Deadline(r->t0).passed(now)) {
                *err = Deadline::expired(cs->describe() + ": " + what);
                if (cs->pg) cs->pg->fail(*err);
                cs->cap.store(NM_CAP_FAILED);
                return NM_ERR_TIMEOUT;
            }
            if (!warned && nm_cfg.WARN_AFTER > 0 && waited > nm_cfg.WARN_AFTER) {
                warned = true;
                NM_WARN(COLL, "%s: waiting %.0f s for the other ranks: %s", cs->describe().c_str(), waited, what);
            }
            sched_yield();
        }
    }
}

static nm_status_t flush_waitable_locked(CommState *cs, uint64_t seq, std::string *err)
{
    while (!cs->queue.empty() && cs->queue.front()->seq <= seq) {
        int q = (int)std::min<size_t>(cs->queue.size(), (size_t)std::max<long>(1, nm_cfg.COALESCE_MAX));
        Round *r = round_start(cs, q);
        int m = 1;
        if (q > 1) {
            nm_status_t st = round_wait(cs, r, err);
            if (st != NM_OK) {
                std::vector<Op *> ops(cs->queue.begin(), cs->queue.end());
                queue_pop(cs, (int)ops.size());
                fail_ops(ops.data(), (int)ops.size(), st, *err);
                to_background(MPI_COMM_NULL, {r});
                return st;
            }
            m = std::max(1, std::min(q, r->result));
            delete r;
        } else {
            cs->rounds.push_back(r);
        }
        launch_front(cs, m);
    }
    rounds_reap(cs->rounds);
    return NM_OK;
}

nm_status_t engine_flush_waitable(CommState *cs, uint64_t seq)
{
    // Every other communicator's queue first, as singletons: a rank never waits for a round on
    // one communicator while it has not proposed on another (two ranks waiting on each other's
    // communicator would both wait forever); for the same reason the queued point-to-point
    // envelopes go before the wait (a peer may need one to reach this round).
    env_flush_sends();
    engine_flush_all_except(cs);
    std::string err;
    QueueLock g(cs);
    return flush_waitable_locked(cs, seq, &err);
}

// Communicators with queued ops (the registry of the queue)
static std::mutex qmu;
static std::vector<CommState *> queued_comms;

void engine_flush_all()
{
    env_flush_sends();
    engine_flush_all_except(nullptr);
}

void engine_flush_all_except(const CommState *keep)
{
    std::vector<CommState *> v;
    {
        std::lock_guard<std::mutex> g(qmu);
        v.swap(queued_comms);
    }
    std::vector<CommState *> busy;
    for (CommState *cs : v) {
        if (cs == keep) {  // the caller waits on this one's round next: it stays registered
            busy.push_back(cs);
            continue;
        }
        // a communicator another thread holds is that thread's to flush (it is launching, or
        // waiting for an agreement whose proposal it already made): never wait for it here
        std::unique_lock<std::mutex> g(cs->mu, std::try_to_lock);
        if (!g.owns_lock()) {
            cs->flush_req.store(true, std::memory_order_release);
            // the holder may have released the lock before seeing the request: try once more
            g.try_lock();
            if (!g.owns_lock()) {
                busy.push_back(cs);
                continue;
            }
            cs->flush_req.store(false, std::memory_order_relaxed);
        }
        flush_singletons(cs);
        g.unlock();
        comm_release(cs);
    }
    if (!busy.empty()) {
        std::lock_guard<std::mutex> g(qmu);
        queued_comms.insert(queued_comms.end(), busy.begin(), busy.end());
    }
}

// ---- explicit groups -------------------------------------------------------------------------
static thread_local int group_depth __attribute__((tls_model("initial-exec")));
static thread_local std::vector<Op *> group_ops;  // (only inside explicit groups)

int engine_group_depth() { return group_depth; }

int engine_group_begin()
{
    if (group_depth++ == 0) engine_flush_all();  // what came before goes first
    return MPI_SUCCESS;
}

static nm_status_t launch_explicit(std::string *err)
{
    // (the group's ops taken out, group_ops left with the previous group's emptied array: no
    // allocation once warm)
    static thread_local std::vector<Op *> ops;
    ops.clear();
    ops.swap(group_ops);
    if (ops.empty()) return NM_OK;
    CommState *one = ops[0]->cs;
    for (Op *op : ops)
        if (op->cs != one) one = nullptr;
    if (one) {  // the common case: one communicator's group
        QueueLock g(one);
        nm_status_t st = launch(one, ops.data(), (int)ops.size(), one->pg ? one->pg->stream() : nullptr, err);
        if (st != NM_OK) fail_ops(ops.data(), (int)ops.size(), st, *err);
        return st;
    }
    // one NCCL group per communicator, in the order of first appearance; the communicators'
    // groups follow one another (NCCL orders each communicator's work on its own)
    nm_status_t first = NM_OK;
    std::vector<char> done(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); i++) {
        if (done[i]) continue;
        CommState *cs = ops[i]->cs;
        std::vector<Op *> mine;
        for (size_t j = i; j < ops.size(); j++)
            if (!done[j] && ops[j]->cs == cs) {
                mine.push_back(ops[j]);
                done[j] = 1;
            }
        QueueLock g(cs);
        nm_status_t st = launch(cs, mine.data(), (int)mine.size(), cs->pg ? cs->pg->stream() : nullptr, err);
        if (st != NM_OK) {
            fail_ops(mine.data(), (int)mine.size(), st, *err);
            if (first == NM_OK) first = st;
        }
    }
    return first;
}

int engine_group_end()
{
    if (group_depth == 0) return MPI_ERR_OTHER;
    if (--group_depth > 0) return MPI_SUCCESS;
    std::string err;
    return launch_explicit(&err) == NM_OK ? MPI_SUCCESS : MPI_ERR_OTHER;
}

// ---- submission ------------------------------------------------------------------------------
nm_status_t engine_run_blocking(Op *op, std::string *err)
{
    CommState *cs = op->cs;
    if (group_depth > 0) {  // a blocking call ends the explicit group here (every rank does the same)
        nm_status_t st = launch_explicit(err);
        if (st != NM_OK) { op_put(op); return st; }
    }
    nm_status_t st;
    const bool queued = __atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED) != 0;
    NvtxStage sg_flush(stage::kFlush);
    if (queued) engine_flush_all_except(cs);  // the others' queues are proposed before this one's round
    {
        QueueLock g(cs);
        // what this communicator queued goes first, in groups agreed with the other ranks (every
        // rank is in this blocking collective, after the same nonblocking ones)
        st = flush_waitable_locked(cs, UINT64_MAX, err);
        sg_flush.end();
        if (st == NM_OK) {
            op->seq = ++cs->seq;
            st = launch(cs, &op, 1, pick_stream(cs->pg.get(), true), err);
        }
    }
    if (st != NM_OK) {
        op_put(op);
        return st;
    }
    if ((op->act & NM_ACT_CARRIER) && nccl_carrier(*op, true) != MPI_SUCCESS) {
        *err = "the real MPI failed the matching zero-count call";
        st = NM_ERR_MPI;
    }
    bool warned = false;
    NvtxStage sg_wait(stage::kWait);
    for (unsigned spin = 0;; spin++) {
        nm_status_t pst;
        if (op_poll(op, &pst, err, 0)) {
            if (st == NM_OK) st = pst;
            break;
        }
        if ((spin & 15) == 15) mpi_progress();
        if ((spin & 4095) == 4095) {
            double waited = nm_now_s() - op->t_launch;
            if (!warned && nm_cfg.WARN_AFTER > 0 && waited > nm_cfg.WARN_AFTER) {
                warned = true;
                NM_WARN(COLL, "%s has waited %.0f s (NCCLMPI_TIMEOUT=%ld)", op->describe().c_str(), waited, nm_cfg.TIMEOUT);
            }
            sched_yield();
        }
    }
    op_finish(op, st != NM_OK);
    return st;
}

// ---- operations enqueued on the application's stream (MPIX_*_enqueue) ---------------------------
// Nothing waits for them, and a marker per launch would cost more than the launch (a stream
// memory write 1-2.5 us, an event record 0.3-0.45 us; an event query 1.3 us): launched ops wait
// unmarked, and now and then (every kEnqBatch launches, at the process's progress points) one
// event per stream marks every op launched on it so far. An op is finished when its batch's event
// has completed (or its communicator failed): at a later progress point, at the latest at
// MPI_Finalize.
namespace {
constexpr size_t kEnqBatch = 32;
struct EnqBatch {
    ProcessGroup *pg;
    CUevent ev;
    std::vector<Op *> ops;
    double t0;
    double async_checked = 0;
};
std::mutex enq_mu;
std::vector<Op *> enq_unmarked;  // launched, in launch order
std::deque<EnqBatch> enq_batches;
std::atomic<size_t> enq_unmarked_n{0}, enq_batched_n{0};  // their sizes, read without the lock
}  // namespace

// One event on each stream the unmarked ops were launched on (enq_mu held).
static void enq_mark()
{
    while (!enq_unmarked.empty()) {
        Op *first = enq_unmarked.front();
        ProcessGroup *pg = first->done->pg;
        const CUstream s = first->enq_stream;
        EnqBatch b{pg, nullptr, {}, nm_now_s()};
        std::vector<Op *> rest;
        for (Op *op : enq_unmarked) (op->done->pg == pg && op->enq_stream == s ? b.ops : rest).push_back(op);
        enq_unmarked.swap(rest);
        {
            DeviceGuard g(pg->ctx());
            b.ev = pg->event_get();
            if (b.ev && cu.cuEventRecord(b.ev, s) != CUDA_SUCCESS) {
                pg->event_put(b.ev);
                b.ev = nullptr;
            }
        }
        if (!b.ev) {  // no marker: known complete once the stream is (waited for here)
            DeviceGuard g(pg->ctx());
            cu.cuStreamSynchronize(s);
        }
        enq_batched_n.fetch_add(b.ops.size(), std::memory_order_relaxed);
        enq_batches.push_back(std::move(b));
    }
    enq_unmarked_n.store(0, std::memory_order_relaxed);
}

// Whether batch b is over: its event completed, or its communicator failed (NCCL's asynchronous
// error, or NCCLMPI_TIMEOUT, which aborts it so that the stream's NCCL kernels end).
static bool enq_batch_over(EnqBatch &b, bool *failed)
{
    ProcessGroup *pg = b.pg;
    *failed = pg->failed();
    if (*failed || !b.ev) return true;
    CUresult q;
    {
        DeviceGuard g(pg->ctx());
        q = cu.cuEventQuery(b.ev);
    }
    if (q == CUDA_SUCCESS) return true;
    const double waited = nm_now_s() - b.t0;
    if (q != CUDA_ERROR_NOT_READY) {
        pg->fail(std::string("an operation enqueued on a stream: event query failed: ") + cuda_errstr(q));
    } else if (Deadline(b.t0).passed(b.t0 + waited)) {
        pg->fail(Deadline::expired(b.ops.back()->describe() + " enqueued on a stream"));
    } else if (waited - b.async_checked >= 1e-3) {
        b.async_checked = waited;
        pg->check_async();
    }
    *failed = pg->failed();
    return *failed;
}

void engine_enqueued_mark()
{
    if (!enq_unmarked_n.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> g(enq_mu);
    enq_mark();
}

// When: LAUNCH (an enqueue call: only once kEnqBatch ops wait unmarked, so that a host running
// ahead of its stream does not query an event per call), PROGRESS (a progress point of the
// application's: mark what is unmarked, finish what is over), WAIT (MPI_Finalize: all, to the end).
enum class Reap { LAUNCH, PROGRESS, WAIT };
static void enqueued_reap(Reap when)
{
    const bool wait = when == Reap::WAIT;
    const size_t unmarked = enq_unmarked_n.load(std::memory_order_relaxed);
    if (when == Reap::LAUNCH ? unmarked < kEnqBatch : !wait && !unmarked && !enq_batched_n.load(std::memory_order_relaxed))
        return;  // nothing due
    std::unique_lock<std::mutex> g(enq_mu, std::defer_lock);
    if (wait) g.lock();
    else if (!g.try_lock()) return;
    enq_mark();
    for (unsigned spin = 0; !enq_batches.empty(); spin++) {
        bool failed = false;
        EnqBatch &b = enq_batches.front();
        if (enq_batch_over(b, &failed)) {
            if (failed) {
                for (Op *op : b.ops) op->cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
                NM_WARN(COLL, "%d operation(s) enqueued on a stream failed: %s", (int)b.ops.size(), b.pg->fail_reason().c_str());
            }
            if (b.ev) b.pg->event_put(b.ev);
            leftovers.fetch_sub((int)b.ops.size(), std::memory_order_relaxed);
            enq_batched_n.fetch_sub(b.ops.size(), std::memory_order_relaxed);
            for (Op *op : b.ops) op_finish(op, failed);
            enq_batches.pop_front();
            continue;
        }
        if (!wait) break;
        wait_step(spin);
    }
}

nm_status_t engine_run_enqueued(Op *op, CUstream s, std::string *err)
{
    CommState *cs = op->cs;
    enqueued_reap(Reap::LAUNCH);
    if (group_depth > 0) {  // as a blocking call: ends the explicit group (every rank does the same)
        nm_status_t st = launch_explicit(err);
        if (st != NM_OK) { op_put(op); return st; }
    }
    if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED) != 0) engine_flush_all_except(cs);
    op->enq_stream = s;
    cs->refs.fetch_add(1, std::memory_order_relaxed);  // released when the op is finished
    nm_status_t st;
    {
        QueueLock g(cs);
        // where a blocking call would launch: after this communicator's queue, in agreed groups
        st = flush_waitable_locked(cs, UINT64_MAX, err);
        if (st == NM_OK) {
            op->seq = ++cs->seq;
            st = launch(cs, &op, 1, s, err);
        }
    }
    if (st != NM_OK) {
        op_put(op);
        comm_release(cs);
        return st;
    }
    MtLock<std::mutex> g(enq_mu);
    enq_unmarked.push_back(op);
    enq_unmarked_n.store(enq_unmarked.size(), std::memory_order_relaxed);
    leftovers.fetch_add(1, std::memory_order_relaxed);  // engine_progress reaps while any is left
    return NM_OK;
}

nm_status_t engine_submit(Op *op, std::string *err)
{
    CommState *cs = op->cs;
    ProcessGroup *pg = cs->pg.get();
    // An op of an explicit group follows the application's work up to the group's end, where
    // launch() records the point once, as NCCL orders a group's work at ncclGroupEnd. Any other op
    // follows what the legacy stream holds now.
    const bool grouped = group_depth > 0 && !(op->act & NM_ACT_CARRIER);
    if (nm_cfg.STREAM_ORDER && pg && !grouped) {
        NvtxStage sg_order(stage::kOrder);
        DeviceGuard g(pg->ctx());
        op->order_ev = pg->event_get();
        if (op->order_ev) cu.cuEventRecord(op->order_ev, CU_STREAM_LEGACY);
    }
    cs->refs.fetch_add(1, std::memory_order_relaxed);  // released when the op completes
    if (grouped) {
        QueueLock g(cs);
        op->seq = ++cs->seq;
        op->explicit_group = true;
        group_ops.push_back(op);
        return NM_OK;
    }
    QueueLock g(cs);
    op->seq = ++cs->seq;
    // An op with a carrier (an ambiguous kind) is not queued: its ranks without data took the host
    // route, a flush point, so every rank's queue is empty here and this op is in no round.
    if (!nm_cfg.COALESCE || cs->hidden == MPI_COMM_NULL || (op->act & NM_ACT_CARRIER)) {
        nm_status_t st = launch(cs, &op, 1, pg->stream(), err);
        if (st != NM_OK) op->task->fail_op(st, *err);
        return NM_OK;
    }
    // An op that does not follow another nonblocking op on this communicator within the window is
    // launched now, as a group of its own (a proposal of 1: safe at any time, whatever the peers
    // do): an isolated MPI_Iallreduce overlaps the compute that follows it. Ops issued back to
    // back are queued for one agreed group. The decision is this rank's alone; the rounds keep
    // every rank's groups equal whatever each decided.
    double now = nm_now_s();
    bool burst = engine_may_hold() && now - cs->last_nb < 1e-6 * (double)nm_cfg.COALESCE_WINDOW;
    cs->last_nb = now;
    if (!burst) {
        flush_singletons(cs);  // what an earlier burst left queued goes first
        cs->rounds.push_back(round_start(cs, 1));
        nm_status_t st = launch(cs, &op, 1, pg->stream(), err);
        if (st != NM_OK) op->task->fail_op(st, *err);
        return NM_OK;
    }
    if (cs->queue.empty()) {
        cs->refs.fetch_add(1, std::memory_order_relaxed);  // held by the registry of queues
        std::lock_guard<std::mutex> q(qmu);
        queued_comms.push_back(cs);
    }
    cs->queue.push_back(op);
    __atomic_add_fetch(&nm_hot.queued, 1, __ATOMIC_RELAXED);
    return NM_OK;
}

// ---- completion ------------------------------------------------------------------------------
bool op_poll(Op *op, nm_status_t *st, std::string *err, uint64_t sweep)
{
    if (!op->is_launched()) return false;
    Completion *d = op->done;
    ProcessGroup *pg = d->pg;
    CUresult q = CUDA_ERROR_NOT_READY;
    if (d->complete.load(std::memory_order_acquire)) {
        q = CUDA_SUCCESS;
    } else if (d->flag) {
        if (__atomic_load_n(d->flag, __ATOMIC_ACQUIRE) >= d->ticket) {
            q = CUDA_SUCCESS;
            d->complete.store(true, std::memory_order_release);
        }
    } else if (sweep && d->notready_sweep.load(std::memory_order_relaxed) == sweep) {
        return false;  // an op of the same launch found it not complete in this sweep
    } else if (!pg->failed()) {
        DeviceGuard g(pg->ctx());
        q = d->legacy ? cu.cuStreamQuery(CU_STREAM_LEGACY) : cu.cuEventQuery(d->ev);
        if (q == CUDA_SUCCESS) d->complete.store(true, std::memory_order_release);
        else if (q == CUDA_ERROR_NOT_READY && sweep) d->notready_sweep.store(sweep, std::memory_order_relaxed);
    }
    if (q == CUDA_ERROR_NOT_READY && !pg->failed()) {
        const double now = nm_now_s(), waited = now - op->t_launch;
        if (Deadline(op->t_launch).passed(now)) {
            pg->fail(Deadline::expired(op->describe()));
            op->cs->cap.store(NM_CAP_FAILED);
        } else if (waited - d->async_checked.load(std::memory_order_relaxed) < 1e-3) {
            return false;  // NCCL's asynchronous error is polled once a millisecond per launch
        } else if (d->async_checked.store(waited, std::memory_order_relaxed), pg->check_async() != NM_OK) {
            op->cs->cap.store(NM_CAP_FAILED);
        } else {
            return false;
        }
    }
    if (pg->failed()) {
        *st = NM_ERR_NCCL;
        *err = pg->fail_reason();
        op->cs->cap.store(NM_CAP_FAILED);
        return true;
    }
    if (q != CUDA_SUCCESS) {
        *st = NM_ERR_CUDA;
        *err = std::string("event query failed: ") + cuda_errstr(q);
        return true;
    }
    if (op->carrier != MPI_REQUEST_NULL) {  // the real MPI's part of an ambiguous kind
        int flag = 0;
        PMPI_Test(&op->carrier, &flag, MPI_STATUS_IGNORE);
        if (!flag) return false;
    }
    op_post_host(*op);
    *st = NM_OK;
    return true;
}

// Carrier requests of failed ops: completed in the background (a collective's request may not be
// freed), never waited for where the caller expects to return.
static std::mutex carrier_mu;
static std::vector<MPI_Request> orphan_carriers;

void op_finish(Op *op, bool failed)
{
    if (op->carrier != MPI_REQUEST_NULL) {
        int flag = 0;
        PMPI_Test(&op->carrier, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            std::lock_guard<std::mutex> g(carrier_mu);
            orphan_carriers.push_back(op->carrier);
            leftovers.fetch_add(1, std::memory_order_relaxed);
        }
        op->carrier = MPI_REQUEST_NULL;
    }
    CommState *cs = op->cs;
    bool launched = op->is_launched();
    if (launched) {
        ProcessGroup *pg = op->done->pg;
        if (failed) {  // the aborted stream may still run this op's copies
            DeviceGuard g(pg->ctx());
            cu.cuStreamSynchronize(pg->stream());
        }
        pg->inflight.fetch_sub(1, std::memory_order_relaxed);
        inflight_total.fetch_sub(1, std::memory_order_relaxed);
        completion_drop(op->done);
    } else if (op->order_ev && cs->pg) {
        cs->pg->event_put(op->order_ev);
    }
    for (auto &b : op->bounce) pinned_put(b.first, b.second);
    op->bounce.clear();
    bool nb = op->task != nullptr || op->enqueued();
    op_put(op);
    if (nb) comm_release(cs);
}

void engine_progress()
{
    side_graves_reap();  // (one load when there are none)
    deadline_progress();
    if (!leftovers.load(std::memory_order_relaxed)) return;
    enqueued_reap(Reap::PROGRESS);  // (the enqueued ops so far get their markers)
    {
        std::unique_lock<std::mutex> g(background_mu, std::try_to_lock);
        for (size_t i = 0; g.owns_lock() && i < background.size();) {
            rounds_reap(background[i].rounds);
            if (background[i].rounds.empty()) {
                if (background[i].hidden != MPI_COMM_NULL) PMPI_Comm_free(&background[i].hidden);
                background[i] = std::move(background.back());
                background.pop_back();
                leftovers.fetch_sub(1, std::memory_order_relaxed);
            } else {
                i++;
            }
        }
    }
    std::unique_lock<std::mutex> g(carrier_mu, std::try_to_lock);
    for (size_t i = 0; g.owns_lock() && i < orphan_carriers.size();) {
        int flag = 0;
        PMPI_Test(&orphan_carriers[i], &flag, MPI_STATUS_IGNORE);
        if (flag) {
            orphan_carriers[i] = orphan_carriers.back();
            orphan_carriers.pop_back();
            leftovers.fetch_sub(1, std::memory_order_relaxed);
        } else {
            i++;
        }
    }
}

void engine_drain()
{
    // MPI_Finalize: the operations enqueued on streams run to their end (every rank enqueued
    // the same ones)
    enqueued_reap(Reap::WAIT);
    // every rank started the same rounds and is here, so waiting ends (NCCLMPI_TIMEOUT bounds it:
    // a round that does not complete is left, with its communicator, to the real MPI_Finalize)
    std::lock_guard<std::mutex> g(background_mu);
    for (Background &b : background)
        if (rounds_complete(b.rounds, "a freed communicator's") && b.hidden != MPI_COMM_NULL) PMPI_Comm_free(&b.hidden);
    leftovers.fetch_sub((int)background.size(), std::memory_order_relaxed);
    background.clear();
}

// MPI_Finalize: the rounds still in flight on a live communicator (singletons, whose results
// nobody waits for) completed before its hidden duplicate goes with the real MPI_Finalize.
void engine_rounds_drain(CommState *cs)
{
    QueueLock g(cs);
    if (!cs->queue.empty()) flush_singletons(cs);
    rounds_complete(cs->rounds, cs->describe().c_str(), cs->pg && cs->pg->failed());
}

void engine_comm_freed(CommState *cs)
{
    QueueLock g(cs);
    cs->freed = true;
    if (!cs->queue.empty()) flush_singletons(cs);
    if (cs->hidden != MPI_COMM_NULL) {
        rounds_reap(cs->rounds);
        if (cs->rounds.empty()) {
            PMPI_Comm_free(&cs->hidden);
        } else {  // freed by engine_progress once its rounds completed (nothing waits here)
            NM_DEBUG(COLL, "%s freed with %zu agreement rounds in flight", cs->describe().c_str(), cs->rounds.size());
            if (cs->pg && cs->pg->failed())  // a peer may never start them (rounds_complete)
                for (Round *r : cs->rounds) r->abandoned = true;
            to_background(cs->hidden, std::move(cs->rounds));
            cs->rounds.clear();
            cs->hidden = MPI_COMM_NULL;
        }
    }
}

}  // namespace ncclmpi
