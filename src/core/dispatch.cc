// ncclmpi: the one choke point. Every described call comes through nm_enter: derive its context
// once, classify its buffers, route it (src/route) from facts every rank shares, then run it
// through the engine (NCCL), stage it (the real MPI on host shadows, called from here), or hand
// it back to the wrapper for the real MPI, untouched. Each call is traced here and nowhere else.
#include "nm_build.h"
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "core/comm/comm_state.h"
#include "core/cuda/kernels.h"
#include "core/cuda/memkind.h"
#include "core/dtype/buffers.h"
#include "core/dtype/layout.h"
#include "core/engine/deadline.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/nvtx.h"
#include "core/op_table.h"
#include "core/tl/nccl/coll_nccl.h"
#include "core/tl/nccl/nccl_api.h"
#include "core/tl/oneshot/oneshot.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/p2p/neighbor.h"
#include "core/tl/p2p/self_copy.h"
#include "core/tl/staged/persistent.h"
#include "core/tl/shared/shared_gpu.h"
#include "core/stream/enqueue.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/watchdog.h"

namespace ncclmpi {

extern int nm_thread_multiple;
extern int nm_thread_single;

static __thread int depth __attribute__((tls_model("initial-exec")));
struct DepthGuard {
    DepthGuard() { depth++; }
    ~DepthGuard() { depth--; }
};

static bool initialized, finalized;

// NCCLMPI_RENDEZVOUS (route.h, nm_turn_applies): whether turns are taken, agreed over
// MPI_COMM_WORLD at MPI_Init; the process's turn: 1 while a thread's blocking collective holds it.
static int turns_on;
static std::atomic<int> turn_taken{0};
struct Turn {
    bool held = false;
    void release()
    {
        if (held) turn_taken.store(0, std::memory_order_release);
        held = false;
    }
    ~Turn() { release(); }
};
}  // namespace ncclmpi
// Communicators marked PENDING: while any is, Fortran collectives take the C path too (a
// blocking collective on one creates its NCCL communicator, on every rank).
extern "C" int nm_pending_comms;
int nm_pending_comms;
namespace ncclmpi {
static bool managed_as_host;  // NCCLMPI_MANAGED=host
static std::mutex init_mu;

// ---- errors: the standard class, with our message behind MPI_Error_string ----------------
static int raise_error(const nm_op_t *o, nm_status_t st, const std::string &why)
{
    return nm_raise_error(o->fn, st, why.c_str(), o->comm);
}

// Once per cause: say why device buffers took the slower staged path (later ones are counted,
// NCCLMPI_STATS=1 prints them).
static void note_staged(const nm_op_t *o, nm_why_t why)
{
    static bool said[NM_WHY_COUNT_];
    if (why < 0 || why >= NM_WHY_COUNT_ || __atomic_exchange_n(&said[why], true, __ATOMIC_RELAXED)) return;
    NM_INFO(ROUTE, "MPI_%s on device buffers goes through the staged path: %s (said once per cause)",
            nm_fn_names[o->fn], nm_why_str(why));
}

// ---- 8-bit integer sums ----------------------------------------------------------------------
// Open MPI 4.1's op/avx component adds 8-bit integers with saturation (MPI_SUM of 100
// MPI_UNSIGNED_CHAR values can give 0xff instead of the value modulo 256). Calls that ncclmpi
// runs through the real MPI on its own copies, and every rank's call under NCCLMPI_AGREE (whose
// host ranks meet staged ranks in one collective), use this wrapping sum instead: one user op,
// chosen from shared facts (op, the signature's basic type, settings), so every rank passes the
// same op. Bytes add alike for signed and unsigned 8-bit types.
static void wrap_sum8(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const DtypeInfo *d = dtype_info(*dt);
    if (d && d->contig) {
        unsigned char *a = (unsigned char *)in + d->true_lb, *b = (unsigned char *)inout + d->true_lb;
        for (size_t i = 0, n = (size_t)*len * d->size; i < n; i++) b[i] = (unsigned char)(b[i] + a[i]);
        return;
    }
    Layout l;
    if (!layout_build(*dt, *len, (size_t)1 << 30, &l)) return;
    for (const LayoutRun &r : l.runs)
        for (size_t k = 0; k < r.count; k++) {
            unsigned char *a = (unsigned char *)in + r.off + (MPI_Aint)k * r.stride;
            unsigned char *b = (unsigned char *)inout + r.off + (MPI_Aint)k * r.stride;
            for (size_t i = 0; i < r.len; i++) b[i] = (unsigned char)(b[i] + a[i]);
        }
}

static bool int8_basic(MPI_Datatype t)
{
    return t == MPI_SIGNED_CHAR || t == MPI_UNSIGNED_CHAR || t == MPI_INT8_T || t == MPI_UINT8_T || t == MPI_CHAR ||
           t == MPI_INTEGER1;
}

// 1 when it replaced o's op
static bool use_wrapping_sum8(nm_op_t *o, const DtypeInfo *d)
{
    if (o->op != MPI_SUM || !d || !int8_basic(d->basic) || !nm_opkind_is_reduction(o->kind)) return false;
    // made once (a function-local static, as fault_now's: no std::call_once thread-local work per call)
    static const MPI_Op op = [] {
        MPI_Op made = MPI_OP_NULL;
        PMPI_Op_create(wrap_sum8, 1, &made);
        return made;
    }();
    if (op == MPI_OP_NULL) return false;
    o->op = op;
    return true;
}

// ---- lifecycle -------------------------------------------------------------------------------
static int self_keyval = MPI_KEYVAL_INVALID;

static int self_delete_fn(MPI_Comm, int, void *, void *)
{
    nm_before_finalize();
    return MPI_SUCCESS;
}

// Settings that decide routes, groups or chunking must be equal on every rank: compared once.
// Returns 1 when some rank runs under MPI_THREAD_MULTIPLE (the same on every rank).
static int check_settings_agree()
{
    char text[512];
    snprintf(text, sizeof(text), "DISABLE=%d FORCE_STAGED=%d AGREE=%d COALESCE=%d COALESCE_MAX=%ld STAGE_CHUNK=%zu "
             "MANAGED=%s EAGER=%d SPLIT=%d STATS=%d ONESHOT=%d ONESHOT_MAX=%zu kernels=%d P2P_ENVELOPE=%s/%zu "
             "SHARED_GPU=%d/%zu/%d/%zu FUSE=%s/%zu/%ld CONNECT=%s/%ld TIMEOUT>0=%d RENDEZVOUS=%d",
             nm_cfg.DISABLE,
             nm_cfg.FORCE_STAGED, nm_cfg.AGREE, nm_cfg.COALESCE, nm_cfg.COALESCE_MAX, nm_cfg.STAGE_CHUNK,
             nm_cfg.MANAGED, nm_cfg.EAGER, nm_cfg.SPLIT,
             (int)nm_cfg.STATS,  // STATS: the summary at MPI_Finalize is a reduction
             nm_cfg.ONESHOT, (size_t)nm_cfg.ONESHOT_MAX, kernels_built() ? 1 : 0, nm_cfg.P2P_ENVELOPE,
             (size_t)nm_cfg.P2P_ENVELOPE_MIN, nm_cfg.SHARED_GPU, (size_t)nm_cfg.SHARED_MIN,
             nm_cfg_from_env("SHARED_MIN"), (size_t)nm_cfg.SHARED_SLOT, nm_cfg.FUSE, (size_t)nm_cfg.FUSE_MAX,
             nm_cfg.FUSE_MIN, nm_cfg.CONNECT, nm_cfg.CONNECT_PEERS,
             nm_cfg.TIMEOUT > 0,  // (the NCCLMPI_AGREE vote is nonblocking with a timeout: route_vote)
             (int)nm_cfg.RENDEZVOUS);
    long long mine[3], all[3] = {0, 0, 0};
    nm_same_put(mine, nm_hash_str(text));
    mine[2] = nm_thread_multiple;  // (its maximum: some rank's)
    world_max(mine, all, 3, "ncclmpi's settings check");
    if (nm_same_everywhere(mine, all)) return all[2] != 0;
    fprintf(stderr, "[ncclmpi] ERROR rank %d: NCCLMPI_* settings differ between ranks (this rank: %s); they must be "
            "equal on every rank (mpirun -x); is libncclmpi loaded in every rank?\n", world_rank(), text);
    PMPI_Abort(MPI_COMM_WORLD, 1);
    return 0;
}

static void init_locked()
{
    if (initialized) return;
    int flag = 0;
    PMPI_Initialized(&flag);
    if (!flag) return;
    initialized = true;
    nm_config_load();
    managed_as_host = !strcmp(nm_cfg.MANAGED, "host");
    int r = world_rank();
    nm_log_set_rank(r);
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    nm_thread_multiple = provided == MPI_THREAD_MULTIPLE;
    nm_thread_single = provided == MPI_THREAD_SINGLE;
    // MPI_Finalize deletes MPI_COMM_SELF's attributes first: our teardown runs there for every
    // language binding, before the real finalize.
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete_fn, &self_keyval, nullptr);
    PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, nullptr);
    turns_on = nm_launch_rendezvous((int)nm_cfg.RENDEZVOUS, check_settings_agree());
    if (!nm_cfg.DISABLE) nm_win_state |= NM_WIN_ON;  // (the same on every rank: settings agree)
    if (!nm_cfg.DISABLE) nccl_connect_setup();
    env_init();
    NM_INFO(INIT, "ncclmpi %s: CUDA driver %s", ncclmpi_version(), cuda_attached() ? "attached" : "not in process");
}

static bool ensure_init()
{
    if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE)) return true;
    std::lock_guard<std::mutex> g(init_mu);
    init_locked();
    return initialized;
}

// ---- the route of one call -------------------------------------------------------------------
namespace {

struct Classified {
    int rank_kind = NM_RK_EMPTY;
    bool differ = false;
    int device = -1;
};

// Pointer kinds asked of the driver during this call (each address is asked once).
struct Memo {
    const void *p[2];
    nm_memkind_t k[2];
    int dev[2];
    int n = 0;
    nm_memkind_t kind(const void *ptr, int *d)
    {
        for (int i = 0; i < n; i++)
            if (p[i] == ptr) { *d = dev[i]; return k[i]; }
        nm_memkind_t r = nm_mem_kind(ptr, d);
        if (r == NM_MEM_MANAGED && managed_as_host) r = NM_MEM_HOST;
        if (r == NM_MEM_MANAGED && *d < 0) {
            CUdevice cd;
            if (cu.cuCtxGetDevice(&cd) == CUDA_SUCCESS) *d = (int)cd;
        }
        if (n < 2) { p[n] = ptr; k[n] = r; dev[n] = *d; n++; }
        return r;
    }
};

// Where the data lies is judged at the first byte the call touches: the pointer plus the span's
// start (MPI_BOTTOM with absolute addresses, negative lower bounds).
Classified classify(BufRef *b, int nb)
{
    Classified c;
    Memo memo;
    bool any_host = false;
    for (int i = 0; i < nb; i++) {
        if (b[i].empty()) continue;
        int dev = -1;
        nm_memkind_t k = memo.kind(b[i].first(), &dev);
        b[i].kind = k;
        b[i].device = dev;
        if (k == NM_MEM_DEVICE || k == NM_MEM_MANAGED) {
            if (c.device < 0) c.device = dev;
            else if (dev != c.device) c.differ = true;
            c.rank_kind = NM_RK_DEVICE;
        } else {
            any_host = true;
        }
    }
    if (c.rank_kind != NM_RK_DEVICE && any_host) c.rank_kind = NM_RK_HOST;
    return c;
}

// nm_route's peers_cold: a call whose NCCL body is sends and receives, on a READY communicator
// whose peers are not connected yet (with NCCLMPI_CONNECT=lazy they connect at first use, as
// NCCL's do: nothing to agree on)
bool peers_cold(const CommState *cs, int kind, int cap)
{
    return cap == NM_CAP_READY && (nm_opk(kind) & NM_KF_SENDRECV) && connect_mode() != CONNECT_LAZY &&
           !cs->pg->peers_connected();
}

nm_route_in_t route_input(const OpCtx &x, const CommState *cs, const Classified &c)
{
    nm_route_in_t in;
    memset(&in, 0, sizeof(in));
    in.kind = x.o->kind;
    in.flags = x.o->flags;
    in.rank_kind = c.rank_kind;
    in.devices_differ = c.differ;
    in.cap = cs ? cs->getcap() : NM_CAP_INTER;
    in.disable = nm_cfg.DISABLE;
    in.force_staged = nm_cfg.FORCE_STAGED;
    in.agree = nm_cfg.AGREE;
    in.vote = -1;
    const DtypeInfo *d = x.rd ? x.rd : x.sd;  // the signature's basic type (same on both sides)
    in.nccl_type = d ? d->nccl_type : NM_UNSUPPORTED;
    in.nccl_op = nm_map_op(x.o->op);
    // only a device rank can take it (host-buffer calls skip the lookup)
    if (in.cap == NM_CAP_READY && in.rank_kind == NM_RK_DEVICE)
        in.oneshot = oneshot_fits(cs->pg.get(), x.o->kind, d, x.o->op, x.o->rcount);
    in.peers_cold = peers_cold(cs, in.kind, in.cap);
    return in;
}

// The device a creation uses on a rank that has no device buffer in this call.
int creation_device(const CommState *cs, const Classified &c)
{
    if (c.device >= 0) return c.device;
    if (cs->pending_device >= 0) return cs->pending_device;
    CUdevice d;
    CUcontext ctx = nullptr;
    if (cuda_attached() && cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && cu.cuCtxGetDevice(&d) == CUDA_SUCCESS)
        return (int)d;
    return -1;
}

Op *make_op(const nm_op_t *o, const OpCtx &x, CommState *cs, const BufRef *b, int nb, unsigned act)
{
    Op *op = op_get();
    op->o = *o;
    op->rank = x.rank;
    op->size = x.size;
    op->n = x.n;
    op->root = x.root;
    op->inplace = x.inplace;
    op->cs = cs;
    op->act = act;
    if (x.sd) {
        op->sd = *x.sd;
        op->has_sd = true;
        if (!x.sd->contig) PMPI_Type_dup(o->stype, &op->sdup);  // the user may free it before we pack
    }
    if (x.rd) {
        op->rd = *x.rd;
        op->has_rd = true;
        if (!x.rd->contig) PMPI_Type_dup(o->rtype, &op->rdup);
    }
    if (!op->has_rd && op->has_sd) op->rd = op->sd;  // reductions and bcast describe one type
    if (!op->has_sd && op->has_rd) op->sd = op->rd;
    for (int i = 0; i < nb; i++) {
        if (b[i].empty()) continue;
        if (b[i].is_recv) op->rkind = b[i].kind;
        else op->skind = b[i].kind;
    }
    return op;
}

// NCCLMPI_P2P_ENVELOPE: a persistent receive (host memory, or the shadows of stage s) that may
// get envelopes is ncclmpi's (persistent.h): 1 with *rc when it is one
int envelope_recv_init(nm_op_t *o, Stage *s, int *rc)
{
    if (!(o->flags & NM_OPF_PERS) || o->kind != NM_OPK_RECV || o->rpeer == MPI_PROC_NULL || !env_comm(o->comm)) return 0;
    // the real MPI checks the arguments first, on the application's communicator: its error
    // handler reports a bad one, once, as without ncclmpi (ncclmpi's own request lives on a
    // private communicator); the check's request is never started
    MPI_Request check = MPI_REQUEST_NULL;
    if ((*rc = PMPI_Recv_init(o->rbuf, o->rcount, o->rtype, o->rpeer, o->rtag, o->comm, &check)) != MPI_SUCCESS) {
        if (s) stage_release(s);
        o->flags &= ~NM_OPF_STAGED;
        return 1;
    }
    PMPI_Request_free(&check);
    o->flags &= ~NM_OPF_STAGED;  // no copy back after the call: the shadows belong to the request
    *rc = pers_recv_init_envelope(o, s, o->rbuf);
    if (*rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(o->comm, *rc);
    return 1;
}

static bool receives(const nm_op_t *o) { return (nm_opk(o->kind) & NM_KF_RECV) != 0; }

// NCCLMPI_P2P_ENVELOPE, a receive (host memory, or the shadows of stage s): a persistent one is
// ncclmpi's; one that a message a probe took out of matching satisfies gets it now (1 with *rc:
// done; 0: the wrapper calls the real MPI)
static int envelope_recv(nm_op_t *o, Stage *s, int *rc)
{
    if (o->flags & NM_OPF_PERS) return envelope_recv_init(o, s, rc);
    return receives(o) && env_recv_queued(o, rc, s);
}

// What nm_enter's body leaves to do: nothing (DONE, *rc the result), the wrapper's call of the real
// MPI with the application's arguments (PMPI), or the core's, from the descriptor the body changed
// (REAL: staged shadows, another op, a receive to decode), followed by real_done().
enum Enter { ENTER_PMPI = 0, ENTER_DONE = 1, ENTER_REAL = 2 };

// NCCLMPI_P2P_ENVELOPE: a host send may go as an envelope (DONE, *rc its result); a host receive
// may get one, so real_done() decodes what it got (REAL). x: o's context (x.cs: its communicator's
// state, null for MPI_Mrecv); scratch: room for a Decode in the caller's frame, used by a blocking
// receive (no allocation).
// (A receive too small for an envelope never comes here: env_receive_exempt.)
int envelope_host(nm_op_t *o, const OpCtx &x, int *rc, void *scratch = nullptr)
{
    const CommState *cs = x.cs;
    if (o->kind == NM_OPK_SEND && !(o->flags & NM_OPF_PERS)) {
        if (env_send(o, rc)) return ENTER_DONE;
        env_flush_sends();  // sent as it is: the queued envelopes go first
        return ENTER_PMPI;
    }
    if (envelope_recv(o, nullptr, rc)) return ENTER_DONE;
    // (envelopes travel on intracommunicators only: env_comm's answer, from the state)
    if ((o->flags & NM_OPF_PERS) || !receives(o) || (o->kind != NM_OPK_MRECV && (!cs || cs->inter))) return ENTER_PMPI;
    // (a matched message carries its communicator: packing and errors use MPI_COMM_WORLD's)
    const bool here = scratch && !(o->flags & NM_OPF_NB);
    const Decode init{o->rbuf, o->rcount, o->rtype, o->comm != MPI_COMM_NULL ? o->comm : MPI_COMM_WORLD, {}};
    Decode *d = here ? new (scratch) Decode(init) : decode_new(init);
    if (!(o->flags & NM_OPF_NB) && o->status == MPI_STATUS_IGNORE) o->status = &d->status;
    o->stage = reinterpret_cast<struct nm_stage *>(d);
    o->flags |= NM_OPF_DECODE | (here ? NM_OPF_DECODE_CALLER : 0);
    return ENTER_REAL;
}

int run_nccl(nm_op_t *o, const OpCtx &x, CommState *cs, const BufRef *b, int nb, const Classified &c, unsigned act,
             bool oneshot)
{
    if (cs->pg && cs->pg->device() != c.device) {
        char why[128];
        snprintf(why, sizeof(why), "buffers on device %d, but this communicator's NCCL communicator is on device %d",
                 c.device, cs->pg->device());
        return raise_error(o, NM_ERR_BUFFER, why);
    }
    NvtxStage sg_queue(stage::kQueue);
    Op *op = make_op(o, x, cs, b, nb, act);
    op->oneshot = oneshot;
    sg_queue.end();
    std::string err;
    // a nonblocking call's carrier is made now, in the order of the caller's MPI calls (a
    // blocking call's is made by the engine right after the launch)
    if ((act & NM_ACT_CARRIER) && (o->flags & NM_OPF_NB) && nccl_carrier(*op, false) != MPI_SUCCESS) {
        op_put(op);
        return raise_error(o, NM_ERR_MPI, "the real MPI refused the matching zero-count call");
    }
    if (!(o->flags & NM_OPF_NB)) {
        Enqueue *e = nm_enqueue_now;  // MPIX_*_enqueue: on the application's stream, not waited for
        nm_status_t st = e && e->direct ? engine_run_enqueued(op, e->stream, &err) : engine_run_blocking(op, &err);
        return st == NM_OK ? MPI_SUCCESS : raise_error(o, st, err + " [" + cs->describe() + "]");
    }
    NvtxStage sg_request(stage::kRequest);
    Task *t = Task::get(o);
    t->set_op(op);
    op->task = t;
    sg_request.end();
    {
        NvtxStage sg_submit(stage::kQueue);
        engine_submit(op, &err);
    }
    NvtxStage sg_publish(stage::kRequest);
    return t->publish(o->req);
}

}  // namespace

}  // namespace ncclmpi

using namespace ncclmpi;

// A nonblocking receive, and a nonblocking send that queues its own envelope (or, sent as it is,
// sends the queue first: envelope_host, the staged route), neither wait nor send ahead of the
// queued envelopes: those stay queued (one wait for a burst). Every other call sends them first.
static bool keeps_queued_envelopes(const nm_op_t *o)
{
    return (o->flags & NM_OPF_NB) && !(o->flags & NM_OPF_PERS) &&
           (o->kind == NM_OPK_RECV || o->kind == NM_OPK_MRECV || env_send_defers(o));
}

// One of a call's agreements on o->comm (agree_min_bounded); false with *rc where it failed or
// ran out: the communicator is then FAILED on this rank, and the call fails with the reason.
static bool agree_or_fail(nm_op_t *o, CommState *cs, int mine, int *all, const char *what, int *rc)
{
    std::string err;
    const nm_status_t st = agree_min_bounded(mine, all, o->comm, cs->describe(), what, &err);
    if (st == NM_OK) return true;
    cs->why_failed = err;
    cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
    *rc = raise_error(o, st, err);
    return false;
}

// NCCLMPI_AGREE=1: every rank's route input in.vote, agreed on o->comm (one host allreduce; a
// nonblocking one under NCCLMPI_TIMEOUT, whose setting every rank shares: check_settings_agree).
// false with *rc: the vote failed or ran out (the communicator is FAILED on this rank).
static bool route_vote(nm_op_t *o, CommState *cs, nm_route_in_t *in, int *rc)
{
    static const char why[] = "agreeing on the route with the other ranks, as NCCLMPI_AGREE=1 asks";
    int vote = nm_route_vote(in), all = 0;
    WaitWatch w(nm_fn_names[o->fn], why);
    if (!agree_or_fail(o, cs, vote, &all, "the NCCLMPI_AGREE route vote", rc)) return false;
    in->vote = all;
    return true;
}

// NCCLMPI_RENDEZVOUS (route.h): take the process's turn where it is free, and agree on o->comm
// whether every rank did; where one did not, in->busy (the call is staged on every rank) and the
// turn is given back. false with *rc: the agreement failed or ran out.
static bool take_turn(nm_op_t *o, CommState *cs, nm_route_in_t *in, Turn *turn, int *rc)
{
    static const char why[] = "agreeing that no other thread has NCCL work on any rank (NCCLMPI_RENDEZVOUS)";
    int expect = 0;
    turn->held = turn_taken.compare_exchange_strong(expect, 1, std::memory_order_acquire);
    int all = 0;
    WaitWatch w(nm_fn_names[o->fn], why);
    const int mine = turn->held ? 1 : 0;
    if (!agree_or_fail(o, cs, mine, &all, why, rc)) {
        turn->release();
        return false;
    }
    if (!all) {
        turn->release();
        in->busy = 1;  // (counted as the staged route; said once, note_staged)
    }
    return true;
}

// nm_enter without the core's own call of the real MPI: an Enter (scratch: envelope_host's)
static int enter(nm_op_t *o, int *rc, void *scratch)
{
    if (depth || nm_cfg.DISABLE) return ENTER_PMPI;
    // every rank's neighbourhood collective, host or device buffers, where it runs as
    // point-to-point (neighbor.h: agreed, whatever this rank's buffers); at depth 0, since its
    // messages run as the application's own calls
    // (a persistent one restarts its nonblocking form, which comes here: route.h)
    if (NM_UNLIKELY(nm_opk(o->kind) & NM_KF_NEIGH) && !(o->flags & NM_OPF_PERS) && initialized && !finalized &&
        neigh_applies(o->comm)) {
        nm_trace_call(o->fn);
        *rc = neigh_run(o);
        return ENTER_DONE;
    }
    const bool coll = nm_opkind_is_coll(o->kind);
    const bool agree = nm_cfg.AGREE && coll;
    // no CUDA driver in the process: every buffer is host memory, the route is the host's (but
    // for a persistent v/w collective, whose starts every rank runs as ncclmpi's: route.h)
    const bool host_only = !cuda_attached() && !nm_linkmap_refresh() && !agree &&
                           !((o->flags & NM_OPF_PERS) && nm_pers_coll_everywhere(o->kind));
    // (NCCLMPI_P2P_ENVELOPE: only receives, which may get an envelope, and the host test mode's
    // sends have anything to do there, and any call while envelopes are queued)
    if (host_only && (!nm_envelopes_configured || (!receives(o) && !(o->kind == NM_OPK_SEND && nm_env_active && !env_device()) &&
                                                   !__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)))) {
        NM_TRACE(CALL, "MPI_%s -> host (no CUDA driver in the process)", nm_fn_names[o->fn]);
        return ENTER_PMPI;
    }
    if (!ensure_init() || finalized) return ENTER_PMPI;
    DepthGuard dg;
    if (host_only) {  // NCCLMPI_P2P_ENVELOPE: only the envelope hooks have anything to do
        if (!env_on()) return ENTER_PMPI;
        if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED) && !keeps_queued_envelopes(o)) nm_flush();
        env_gate_hold(o);  // (MPI_THREAD_MULTIPLE, a receive: posted by nm_enter under it)
        if (receives(o) && env_receive_exempt(o, dtype_info(o->rtype))) return ENTER_PMPI;
        OpCtx x;
        CommState *cs = o->comm != MPI_COMM_NULL ? comm_state(o->comm) : nullptr;
        if ((!cs && o->kind != NM_OPK_MRECV) || !op_ctx_init(o, cs, &x)) return ENTER_PMPI;  // (invalid: the real MPI reports it)
        NM_COUNT_ROUTE(o->fn, NCCLMPI_ROUTE_HOST);
        return envelope_host(o, x, rc, scratch);
    }
    NvtxStage sg_classify(stage::kClassify);
    CommState *cs = nullptr;
    if (o->comm != MPI_COMM_NULL) cs = comm_state(o->comm);
    else if (o->kind != NM_OPK_MRECV) { nm_flush(); return ENTER_PMPI; }
    OpCtx x;
    BufRef b[2];
    int nb = op_ctx_init(o, cs, &x) ? op_row(o->kind).buffers(x, b) : -1;
    // where the real MPI rejects an aliased send and receive buffer before touching the data
    // (Open MPI 4.1: Allreduce of more than one element, Reduce at the root), it reports it
    const bool aliased = !x.inplace && o->sbuf == o->rbuf && o->sbuf != MPI_BOTTOM &&
                         ((o->kind == NM_OPK_ALLREDUCE && o->rcount > 1) || (o->kind == NM_OPK_REDUCE && x.root && o->rcount > 0));
    if (nb < 0 || aliased) {  // invalid arguments: the real MPI reports them, as without us
        nm_flush();
        return ENTER_PMPI;
    }
    Classified c = classify(b, nb);
    nm_route_in_t in = route_input(x, cs, c);
    if (agree && !(o->flags & NM_OPF_NB) && in.cap != NM_CAP_INTER) {  // every rank votes, host ranks too
        nm_flush();  // (a blocking collective: nothing stays queued while it waits for the peers)
        if (!route_vote(o, cs, &in, rc)) return ENTER_DONE;
    }
    nm_decision_t d = nm_route(&in);
    sg_classify.end();
    // the application reset a device ncclmpi worked on (cuda_api.h): refused before anything
    // made there is named (all ranks of an SPMD program that reset refuse the same call)
    if ((d.route != NCCLMPI_ROUTE_HOST || c.device >= 0) && NM_UNLIKELY(!cuda_ctx_current(c.device))) {
        *rc = raise_error(o, NM_ERR_CUDA, nm_reset_why);
        return ENTER_DONE;
    }
    Turn turn;  // (given back when the call returns: its NCCL work is done by then)
    if (NM_UNLIKELY(turns_on) && ((in.stream_comm = comm_carries_streams(o->comm)), nm_turn_applies(&in, d))) {
        nm_flush();
        if (!take_turn(o, cs, &in, &turn, rc)) return ENTER_DONE;
        if (in.busy) d = nm_route(&in);
    }
    if (d.act & NM_ACT_PENDING) {
        int expect = NM_CAP_UNKNOWN;
        cs->pending_device = c.device;
        if (cs->cap.compare_exchange_strong(expect, NM_CAP_PENDING)) __atomic_add_fetch(&nm_pending_comms, 1, __ATOMIC_RELAXED);
    }
    // The agreed steps of a blocking collective, where every rank of the communicator is: its NCCL
    // side's creation, then (a communicator larger than NCCLMPI_CONNECT_PEERS) its sends and
    // receives connected; each changes only shared facts, which the call is routed on again.
    for (int step = 0; step < 2 && (d.act & (NM_ACT_CREATE | NM_ACT_CONNECT)); step++) {
        nm_flush();
        const bool create = (d.act & NM_ACT_CREATE) != 0;
        {
            WaitWatch w(nm_fn_names[o->fn], create ? "creating the communicator's NCCL communicator, which every rank of it joins"
                                                   : "connecting the communicator's sends and receives to every peer, which every rank of it joins");
            std::lock_guard<std::mutex> g(cs->mu);
            if (create) comm_create(cs, creation_device(cs, c));
            else comm_connect_peers(cs);
        }
        if (create && cs->getcap() == NM_CAP_FAILED && !cs->why_failed.empty()) {  // an agreement ran out here
            *rc = raise_error(o, NM_ERR_TIMEOUT, cs->why_failed);
            return ENTER_DONE;
        }
        in.cap = cs->getcap();
        in.peers_cold = peers_cold(cs, in.kind, in.cap);
        d = nm_route(&in);
    }
    // a send to this rank itself about to reach the real MPI, noted (self_copy.h); a blocking
    // Sendrecv's on the staged route may be the copy instead: p2p_self_sendrecv notes it if not
    if (NM_UNLIKELY(p2p_sends_to_self(o, x)) &&
        !(d.route == NCCLMPI_ROUTE_STAGED && !(o->flags & NM_OPF_NB) &&
          (o->kind == NM_OPK_SENDRECV || o->kind == NM_OPK_SENDRECV_REPLACE)))
        p2p_note_self_send(o, x);
    NM_TRACE(CALL, "MPI_%s %s count=%d/%d root=%d dev=%d -> %s (%s)", nm_fn_names[o->fn],
             cs ? cs->describe().c_str() : "", o->scount, o->rcount, o->root, c.device, nm_route_str(d.route),
             nm_why_str(d.why));
    // ranks sharing GPUs: a large staged collective on the GPU through CUDA IPC (counted there)
    const bool shared = d.route == NCCLMPI_ROUTE_STAGED && shared_applies(x);
    NM_COUNT_ROUTE(o->fn, shared ? NCCLMPI_ROUTE_IPC : d.route);
    // a flush point: everything but a nonblocking NCCL call, which queues behind what is queued
    // (one with a carrier flushes, as its ranks without data do on their host route)
    // (the one-shot route is an engine route like NCCL's: its kernels are ordered with NCCL's)
    const bool engine = d.route == NCCLMPI_ROUTE_NCCL || d.route == NCCLMPI_ROUTE_ONESHOT;
    if (!engine || !(o->flags & NM_OPF_NB) || (d.act & NM_ACT_CARRIER)) {
        if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) {  // nothing to do in the common case
            if (engine) engine_flush_waitable(cs, UINT64_MAX);
            if (!engine && keeps_queued_envelopes(o)) engine_flush_all_except(nullptr);
            else nm_flush();
        }
    }
    if (NM_UNLIKELY(nm_enqueue_now != nullptr)) {  // MPIX_*_enqueue, dispatched as its blocking form
        Enqueue *e = nm_enqueue_now;
        e->direct = engine && !(o->flags & NM_OPF_NB) && !(d.act & NM_ACT_CARRIER) && enqueue_direct_ok(e, cs, b, nb);
        if (!e->direct && enqueue_sync(e) != NM_OK) {
            *rc = raise_error(o, NM_ERR_CUDA, std::string("waiting for the work of the stream of ") + e->call + " failed");
            return ENTER_DONE;
        }
    }
    // (the shared GPU's kernels sum 8-bit integers themselves: its call keeps the application's op)
    const bool op_replaced = ((d.route == NCCLMPI_ROUTE_STAGED && !shared) || (d.route == NCCLMPI_ROUTE_HOST && agree)) &&
                             use_wrapping_sum8(o, x.rd ? x.rd : x.sd);
    if (d.route == NCCLMPI_ROUTE_HOST) {  // the wrapper calls the real MPI (hot path: nothing more)
        if (NM_UNLIKELY(nm_cfg.TIMEOUT > 0) && coll && !(o->flags & (NM_OPF_NB | NM_OPF_PERS))) {
            // a peer may wait elsewhere for good (its device path), and nothing ends this call
            // but the job's end: its wait is marked fatal (enter_real; util/watchdog.h)
            o->flags |= NM_OPF_WATCH;
            if (!env_on() || env_receive_exempt(o, x.rd)) return ENTER_REAL;
        }
        if (NM_UNLIKELY(env_on())) {
            env_gate_hold(o);
            if (!env_receive_exempt(o, x.rd)) {
                const int e = envelope_host(o, x, rc, scratch);
                return e == ENTER_PMPI && op_replaced ? ENTER_REAL : e;
            }
        }
        return op_replaced ? ENTER_REAL : ENTER_PMPI;
    }
    char range[64];
    range[0] = 0;
    if (nm_cfg.NVTX == 1) snprintf(range, sizeof(range), "MPI_%s %s", nm_fn_names[o->fn], nm_route_str(d.route));
    NvtxRange nvtx(range);
    NvtxStage sg_routed(stage::kRouted);
    switch (d.route) {
    case NCCLMPI_ROUTE_NCCL:
    case NCCLMPI_ROUTE_ONESHOT:
        *rc = run_nccl(o, x, cs, b, nb, c, d.act, d.route == NCCLMPI_ROUTE_ONESHOT);
        return ENTER_DONE;
    case NCCLMPI_ROUTE_STAGED: {
        // a persistent send or receive on a communicator that may carry envelopes: each start
        // runs the nonblocking form, as the application's own call (persistent.h)
        if ((o->flags & NM_OPF_PERS) && pers_restart_applies(o)) {
            *rc = pers_restart_init(o);
            return ENTER_DONE;
        }
        // a blocking MPI_Sendrecv(_replace) to the rank itself: one device copy, or none (self_copy.h)
        if (NM_UNLIKELY(o->kind == NM_OPK_SENDRECV || o->kind == NM_OPK_SENDRECV_REPLACE)) {
            nm_status_t st = NM_OK;
            if (p2p_self_sendrecv(o, x, b, nb, &st)) {
                *rc = st == NM_OK ? MPI_SUCCESS : raise_error(o, st, "the device copy of a message to the rank itself failed");
                return ENTER_DONE;
            }
        }
        // NCCLMPI_P2P_ENVELOPE=device: a large contiguous device send goes as an envelope
        if (o->kind == NM_OPK_SEND && nb == 1 && b[0].dense && env_device() &&
            env_send_device(o, b[0].first(), (size_t)(b[0].hi - b[0].lo), c.device, rc))
            return ENTER_DONE;
        // a nonblocking one joins the queue (its copy to the host waited for at the flush, with
        // the others'); any other send goes after what is queued
        const bool later = o->kind == NM_OPK_SEND && env_send_defers(o);
        if (o->kind == NM_OPK_SEND && !later) env_flush_sends();
        if (shared) {
            nm_status_t st = shared_run(x, rc);
            if (st != NM_OK) *rc = raise_error(o, st, "the collective on the shared GPU failed");
            return ENTER_DONE;
        }
        note_staged(o, d.why);
        nm_pipe_t pipe;
        if (stage_pipeline_applies(x, &pipe)) {
            WaitWatch w(nm_fn_names[o->fn], stage_wait_reason, true, cs ? cs->id : -1);
            std::string why;
            nm_status_t st = stage_pipelined(x, pipe, c.device, rc, &why);
            if (st != NM_OK) *rc = raise_error(o, st, why);
            return ENTER_DONE;
        }
        Stage *s = nullptr;
        nm_status_t st = stage_in(o, b, nb, &s, !later);
        if (st == NM_OK && later) {
            if (env_send_staged(o, s, rc)) return ENTER_DONE;
            st = stage_copy_in(s);  // not queued: sent now, after what is
            env_flush_sends();
            if (st != NM_OK) {
                o->flags &= ~NM_OPF_STAGED;
                stage_release(s);
            }
        }
        if (st != NM_OK) {
            *rc = raise_error(o, st, "staging to host failed");
            return ENTER_DONE;
        }
        if (env_on()) {
            env_gate_hold(o);
            if (envelope_recv(o, s, rc)) return ENTER_DONE;
        }
        return ENTER_REAL;  // the real MPI on the host shadows, then the copy back
    }
    case NCCLMPI_ROUTE_ERROR: {
        nm_status_t st = d.why == NM_WHY_FAILED ? NM_ERR_NCCL : NM_ERR_BUFFER;
        std::string why = nm_why_str(d.why);
        if (d.why == NM_WHY_FAILED && cs)
            why += " [" + cs->describe() + (cs->pg ? ": " + cs->pg->fail_reason() : !cs->why_failed.empty() ? ": " + cs->why_failed : "") + "]";
        if (o->req) *o->req = MPI_REQUEST_NULL;  // (a refused I- or _init call's request stays defined)
        *rc = raise_error(o, st, why);
        return ENTER_DONE;
    }
    default:
        return ENTER_PMPI;
    }
}

// Linked after the MPI library (-lmpi -lncclmpi), or dlopen'ed without RTLD_GLOBAL ahead of it,
// the layer is loaded but never called: say so once, at load.
__attribute__((constructor)) static void nm_check_link_order()
{
    void *sym = dlsym(RTLD_DEFAULT, "MPI_Init");
    Dl_info info, self;
    if (!sym || nm_cfg.DISABLE || !dladdr(sym, &info) || !dladdr((void *)&nm_check_link_order, &self) ||
        info.dli_fbase == self.dli_fbase)
        return;
    const char *where = info.dli_fname ? info.dli_fname : "another library";
    fprintf(stderr, "[ncclmpi] WARN: libncclmpi is loaded, but MPI calls resolve to %s and bypass it: build "
            "with ncclmpicc or `pkg-config --libs ncclmpi` (they keep it ahead of the MPI library), or preload it "
            "(LD_PRELOAD, ncclmpi_exec); `ncclmpi_check PROGRAM` tells\n", where);
}

namespace ncclmpi {
#ifdef MPICH
// real_post's send, until real_done gives it to the call's task (the same thread, at once)
static thread_local MPI_Request split_send = MPI_REQUEST_NULL;
static thread_local std::vector<char> *split_copy;

int real_post(nm_op_t *o)
{
    const bool replace = o->kind == NM_OPK_SENDRECV_REPLACE;
    if (!(o->flags & NM_OPF_NB) || !(o->flags & (NM_OPF_STAGED | NM_OPF_DECODE)) ||
        (o->kind != NM_OPK_SENDRECV && !replace))
        return nm_real_fns[o->fn](o);
    std::vector<char> copy;  // a replace's: what it sends, before the receive may overwrite it
    const void *sbuf = o->sbuf;
    int scount = o->scount, pos = 0, size = 0;
    MPI_Datatype stype = o->stype;
    if (replace && o->peer != MPI_PROC_NULL) {
        int rc = PMPI_Pack_size(o->scount, o->stype, o->comm, &size);
        if (rc != MPI_SUCCESS) return rc;
        copy.resize((size_t)size + 1);
        rc = PMPI_Pack(o->rbuf, o->scount, o->stype, copy.data(), size, &pos, o->comm);
        if (rc != MPI_SUCCESS) return rc;
        sbuf = copy.data();
        scount = pos;
        stype = MPI_PACKED;
    }
    int rc = PMPI_Irecv(o->rbuf, o->rcount, o->rtype, o->rpeer, o->rtag, o->comm, o->req);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Request s = MPI_REQUEST_NULL;
    rc = PMPI_Isend(sbuf, scount, stype, o->peer, o->tag, o->comm, &s);
    if (rc != MPI_SUCCESS) {
        PMPI_Cancel(o->req);
        PMPI_Request_free(o->req);
        return rc;
    }
    split_send = s;
    static thread_local std::vector<char> kept;
    kept = std::move(copy);
    split_copy = &kept;
    return MPI_SUCCESS;
}

// The send of real_post's split, to the task that completes the call (with the copy it sends)
static void take_split(Task *t)
{
    if (split_send == MPI_REQUEST_NULL) return;
    t->set_send(split_send, std::move(*split_copy));
    split_send = MPI_REQUEST_NULL;
}
static bool split_pending() { return split_send != MPI_REQUEST_NULL; }
#else
int real_post(nm_op_t *o) { return nm_real_fns[o->fn](o); }
static inline void take_split(Task *) {}
static inline bool split_pending() { return false; }
#endif

int real_done(nm_op_t *o, int rc)
{
    if (!(o->flags & (NM_OPF_DECODE | NM_OPF_STAGED))) return rc;  // (an op replaced, nothing else)
    if (o->flags & NM_OPF_DECODE) {  // a host receive that may have got an envelope
        Decode *d = reinterpret_cast<Decode *>(o->stage);
        const bool caller = o->flags & NM_OPF_DECODE_CALLER;  // (in nm_enter's frame: not freed)
        auto drop = [caller](Decode *x) {
            if (caller) x->~Decode();
            else decode_free(x);
        };
        o->flags &= ~(NM_OPF_DECODE | NM_OPF_DECODE_CALLER);
        o->stage = nullptr;
        if (rc != MPI_SUCCESS) {
            drop(d);
            return rc;
        }
        DepthGuard dg;
        if (o->flags & NM_OPF_NB) {  // decoded by the Wait or Test that completes the real MPI's request
            if (!nm_thread_multiple && !(o->flags & NM_OPF_TASK) && !split_pending()) {
                pers_watch_decode(*o->req, d, o->comm);
                return rc;
            }
            Task *t = Task::get(o);  // (several threads, or a send beside: see Task::set_decode)
            t->set_inner(*o->req, nullptr);
            take_split(t);
            t->set_decode(d);
            return t->publish(o->req);
        }
        rc = env_finish(*d, o->status);
        drop(d);
        // (MPI_Mrecv: the message's communicator is not known here; the code is returned)
        if (rc != MPI_SUCCESS && o->comm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(o->comm, rc);
        return rc;
    }
    Stage *s = reinterpret_cast<Stage *>(o->stage);
    o->flags &= ~NM_OPF_STAGED;
    if (rc != MPI_SUCCESS) {
        stage_release(s);
        return rc;
    }
    DepthGuard dg;
    if (o->flags & NM_OPF_PERS) {  // copies at each MPI_Start and at the completion of each
        pers_register(*o->req, s, o->comm);
        return rc;
    }
    if (o->flags & NM_OPF_NB) {  // the copy back waits for the real MPI's request
        Task *t = Task::get(o);
        t->set_inner(*o->req, s);
        take_split(t);
        return t->publish(o->req);
    }
    nm_status_t st = stage_finish(s, o->status);
    stage_release(s);
    if (st == NM_OK) return rc;
    return raise_error(o, st, st == NM_ERR_TRUNCATE ? "the message is larger than the receive buffer" : "copy back to the device failed");
}
}  // namespace ncclmpi

static const char host_wait_reason[] = "in the real MPI, its buffers in host memory on this rank";

// The real MPI's call of o from its descriptor (under the receive gate, which it drops, when
// `gated`), at depth 0, as the wrapper's own call would be (a user op or error handler that calls
// MPI inside it is seen as usual), then the copy back or the decode; a blocking staged call is
// watched while it waits there (a host receive that only decodes, or a host call with its op
// replaced, waits as host calls do: unwatched)
static inline __attribute__((always_inline)) int enter_real(nm_op_t *o, int *rc, bool gated)
{
    const bool watch = !(o->flags & (NM_OPF_NB | NM_OPF_PERS)) && (o->flags & (NM_OPF_STAGED | NM_OPF_WATCH));
    if (watch) {
        const int id = o->comm != MPI_COMM_NULL ? comm_state(o->comm)->id : -1;
        nm_wd_begin_fatal(nm_fn_names[o->fn], (o->flags & NM_OPF_STAGED) ? stage_wait_reason : host_wait_reason, id);
    }
    *rc = real_done(o, gated ? env_gate_post(o) : real_post(o));
    if (watch) nm_wd_end();
    return 1;
}

// MPI_THREAD_MULTIPLE, a receive that holds the receive gate (envelope.h): posted under it
static __attribute__((noinline, cold)) int enter_gated(nm_op_t *o, int *rc, int e)
{
    if (e == ENTER_DONE) {  // (its message came from the probe queue, or it failed before a post)
        env_gate_drop();
        return 1;
    }
    return enter_real(o, rc, true);
}

extern "C" int nm_enter(nm_op_t *o, int *rc)
{
    alignas(Decode) unsigned char scratch[sizeof(Decode)];  // a blocking receive's decoding state
    const int e = enter(o, rc, scratch);
    if (NM_UNLIKELY(nm_env_gate)) return enter_gated(o, rc, e);
    if (NM_LIKELY(e != ENTER_REAL)) return e;
    return enter_real(o, rc, false);
}

extern "C" void nm_sync(int fn, MPI_Comm comm, int blocking_collective)
{
    nm_trace_call(fn);
    if (depth || !initialized || finalized) return;
    DepthGuard dg;
    nm_flush();
    if (!blocking_collective || comm == MPI_COMM_NULL || !cuda_attached()) return;
    CommState *cs = comm_state(comm);
    if (cs->getcap() != NM_CAP_PENDING) return;
    std::lock_guard<std::mutex> g(cs->mu);
    comm_create(cs, cs->pending_device);
}

extern "C" void nm_trace_call_slow(int fn) { NM_TRACE(CALL, "MPI_%s", nm_fn_names[fn]); }

extern "C" void nm_after_init(void)
{
    std::lock_guard<std::mutex> g(init_mu);
    init_locked();
    if (nm_cfg.EAGER && initialized) {
        nm_linkmap_refresh();
        DepthGuard dg;
        comm_state_created(MPI_COMM_NULL, MPI_COMM_WORLD);
    }
}

extern "C" void nm_before_finalize(void)
{
    std::lock_guard<std::mutex> g(init_mu);
    if (finalized || !initialized) return;
    DepthGuard dg;
    // (after a device reset, what was in flight there is gone with the handles that would wait)
    if (!cuda_attached() || cuda_ctx_current()) {
        WaitWatch w("Finalize", "for ncclmpi's operations still in flight");
        tasks_drain();
        engine_drain();
        comm_states_drain_rounds();
        env_drain();
    }
    nm_wd_stop();
    finalized = true;
    if (cuda_attached()) {
        comm_states_teardown();
        pinned_trim();
    }
    if (nm_cfg.STATS) nm_stats_finalize();
}

extern "C" void nm_comm_created(MPI_Comm parent, MPI_Comm newcomm)
{
    // no CUDA check: what follows is collective, every rank takes part (decided by agreed state)
    if (depth || nm_cfg.DISABLE || !initialized || finalized) return;
    DepthGuard dg;
    neigh_comm_created(newcomm);  // a topology's neighbourhood collectives as point-to-point
    if (nm_cfg.EAGER) comm_state_created(parent, newcomm);
}

// MPIX_Stream_comm_create: every rank of the new communicator is here (a communicator
// constructor), so where every rank attached a CUDA stream (device >= 0) its NCCL communicator is
// made now, before an enqueued call would have to (a creation waits for every rank). The
// settings read here are compared across ranks at MPI_Init, and cap is agreed state.
extern "C" void nm_stream_comm_connect(MPI_Comm comm, int device)
{
    if (depth || nm_cfg.DISABLE || nm_cfg.FORCE_STAGED || !initialized || finalized) return;
    DepthGuard dg;
    CommState *cs = comm_state(comm);
    if (cs->inter || cs->getcap() != NM_CAP_UNKNOWN) return;
    int have = device >= 0 && cuda_attached(), all = 0;
    {
        WaitWatch w("MPIX_Stream_comm_create", "for the other ranks, to make the NCCL communicator of the stream's");
        std::string err;
        if (agree_min(have, &all, comm, cs->describe(), "checking that every rank attached a CUDA stream", &err) != NM_OK) {
            cs->why_failed = err;
            cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
            nm_raise_call("MPIX_Stream_comm_create", MPI_ERR_OTHER, err.c_str(), comm, MPI_FILE_NULL, MPI_WIN_NULL);
            return;
        }
        if (!all) return;
        nm_flush();
        std::lock_guard<std::mutex> g(cs->mu);
        comm_create(cs, device);
    }
}

extern "C" int nm_group_begin(void)
{
    if (!initialized || finalized) return MPI_SUCCESS;
    DepthGuard dg;
    return engine_group_begin();
}

extern "C" int nm_group_end(void)
{
    if (!initialized || finalized) return MPI_SUCCESS;
    DepthGuard dg;
    const int rc = engine_group_end();
    if (engine_group_depth() == 0) env_flush_sends();  // the group's queued sends go now
    return rc;
}

extern "C" __attribute__((visibility("default"))) int ncclmpi_group_begin(void) { return nm_group_begin(); }
extern "C" __attribute__((visibility("default"))) int ncclmpi_group_end(void) { return nm_group_end(); }

extern "C" __attribute__((visibility("default"))) const char *ncclmpi_version(void)
{
    return PACKAGE_VERSION " (NCCL " NM_NCCL_BUILD_VERSION " headers)";
}
