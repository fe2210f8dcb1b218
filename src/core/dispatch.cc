// ncclmpi: the one choke point. Every described call comes through nm_enter: classify the
// buffers, route (src/route), then run it through NCCL, stage it, or hand it back to the
// wrapper for the real MPI. Each call is traced here and nowhere else.
#include "nm_build.h"
#include <mpi.h>
#include <string.h>

#include <map>
#include <mutex>
#include <string>

#include "core/dtype/buffers.h"
#include "core/tl/nccl/coll_nccl.h"
#include "core/cuda/memkind.h"
#include "core/comm/comm_state.h"
#include "core/tl/staged/staging.h"
#include "core/engine/task.h"
#include "interpose/interpose.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"

namespace ncclmpi {

static __thread int depth __attribute__((tls_model("initial-exec")));
struct DepthGuard {
    DepthGuard() { depth++; }
    ~DepthGuard() { depth--; }
};

static bool initialized, finalized;
static bool managed_as_host;  // NCCLMPI_MANAGED=host
static std::mutex init_mu;

// ---- errors: the standard class, with our message behind MPI_Error_string ----------------
static int error_class(nm_status_t st)
{
    switch (st) {
    case NM_ERR_ARG: return MPI_ERR_ARG;
    case NM_ERR_BUFFER: return MPI_ERR_BUFFER;
    case NM_ERR_COUNT: return MPI_ERR_COUNT;
    case NM_ERR_TYPE: return MPI_ERR_TYPE;
    case NM_ERR_ROOT: return MPI_ERR_ROOT;
    case NM_ERR_COMM: return MPI_ERR_COMM;
    case NM_ERR_OP: return MPI_ERR_OP;
    case NM_ERR_NO_MEM: return MPI_ERR_NO_MEM;
    case NM_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case NM_ERR_INTERNAL: return MPI_ERR_INTERN;
    default: return MPI_ERR_OTHER;
    }
}

static int raise_error(const nm_op_t *o, nm_status_t st, const char *why)
{
    static std::mutex mu;
    static std::map<std::string, int> codes;
    char msg[MPI_MAX_ERROR_STRING];
    snprintf(msg, sizeof(msg), "ncclmpi: MPI_%s: %s (%s)", nm_fn_names[o->fn], why, nm_status_str(st));
    NM_WARN(CALL, "%s", msg + 9);
    int cls = error_class(st), code = cls;
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = codes.find(msg);
        if (it != codes.end()) code = it->second;
        else if (PMPI_Add_error_code(cls, &code) == MPI_SUCCESS && PMPI_Add_error_string(code, msg) == MPI_SUCCESS)
            codes[msg] = code;
        else
            code = cls;
    }
    MPI_Comm c = o->comm != MPI_COMM_NULL ? o->comm : MPI_COMM_WORLD;
    PMPI_Comm_call_errhandler(c, code);
    return code;
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

// ---- lifecycle -------------------------------------------------------------------------------
static int self_keyval = MPI_KEYVAL_INVALID;

static int self_delete_fn(MPI_Comm, int, void *, void *)
{
    nm_before_finalize();
    return MPI_SUCCESS;
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
    // MPI_Finalize deletes MPI_COMM_SELF's attributes first: our teardown runs there for every
    // language binding, before the real finalize.
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete_fn, &self_keyval, nullptr);
    PMPI_Comm_set_attr(MPI_COMM_SELF, self_keyval, nullptr);
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
    bool any_device = false, any_host = false, differ = false;
    int device = -1;
};

// Pointer kinds already asked of the driver during this call (each pointer is asked once).
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
    bool device(const void *ptr)
    {
        int d = -1;
        if (!ptr || ptr == MPI_IN_PLACE) return false;
        nm_memkind_t r = kind(ptr, &d);
        return r == NM_MEM_DEVICE || r == NM_MEM_MANAGED;
    }
};

Classified classify(BufRef *b, int nb, Memo &memo)
{
    Classified c;
    for (int i = 0; i < nb; i++) {
        if (!b[i].ptr && b[i].hi <= b[i].lo) continue;
        int dev = -1;
        nm_memkind_t k = memo.kind(b[i].ptr, &dev);
        b[i].kind = k;
        b[i].device = dev;
        if (k == NM_MEM_DEVICE || k == NM_MEM_MANAGED) {
            if (c.device < 0) c.device = dev;
            else if (dev != c.device) c.differ = true;
            c.any_device = true;
        } else if (b[i].hi > b[i].lo) {
            c.any_host = true;
        }
    }
    return c;
}

long long bytes_of(const DtypeInfo *d, long long count) { return d ? count * (long long)d->size : -1; }

nm_route_in_t route_input(const nm_op_t *o, const CommState *cs, const Classified &c)
{
    nm_route_in_t in;
    memset(&in, 0, sizeof(in));
    in.kind = o->kind;
    in.flags = o->flags;
    in.any_device = c.any_device;
    in.any_host = c.any_host;
    in.devices_differ = c.differ;
    in.comm_nccl = cs && !cs->inter && cs->nccl_ok != 0;
    in.disable = nm_cfg.DISABLE;
    in.force_staged = nm_cfg.FORCE_STAGED;
    const DtypeInfo *sd = stype_used(o, cs) ? dtype_info(o->stype) : nullptr;
    const DtypeInfo *rd = rtype_used(o, cs) ? dtype_info(o->rtype) : nullptr;
    in.nccl_type = rd ? rd->nccl_type : (sd ? sd->nccl_type : NM_UNSUPPORTED);
    in.nccl_op = nm_map_op(o->op);
    in.s_contig = sd ? sd->contig : 1;
    in.r_contig = rd ? rd->contig : 1;
    bool root = is_root_side(o, cs);
    long long sb = bytes_of(sd, o->scount), rb = bytes_of(rd, o->rcount);
    switch (o->kind) {
    case NM_OPK_ALLGATHER:
    case NM_OPK_ALLTOALL:
        in.bytes_match = !sd || sb == rb;
        break;
    case NM_OPK_GATHER:
        in.bytes_match = !root || !sd || sb == rb;
        break;
    case NM_OPK_SCATTER:
        in.bytes_match = !root || !rd || sb == rb;
        break;
    case NM_OPK_ALLGATHERV:
        in.bytes_match = !sd || sb == bytes_of(rd, o->rcounts[cs->rank]);
        break;
    case NM_OPK_GATHERV:
        in.bytes_match = !root || !sd || sb == bytes_of(rd, o->rcounts[cs->rank]);
        break;
    case NM_OPK_SCATTERV:
        in.bytes_match = !root || !rd || bytes_of(sd, o->scounts[cs->rank]) == rb;
        break;
    default:
        in.bytes_match = 1;
    }
    return in;
}

}  // namespace

}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" int nm_enter(nm_op_t *o, int *rc)
{
    if (depth || nm_cfg.DISABLE) return 0;
    if (!cuda_attached() && !nm_linkmap_refresh()) return 0;
    if (!ensure_init() || finalized) return 0;
    const bool agree = nm_cfg.AGREE && nm_opkind_is_coll(o->kind) && !(o->flags & NM_OPF_NB);
    // Host buffers leave here: one driver query per pointer, before any other work. (A pointer
    // the call ignores may be garbage: asking the driver about it is harmless.)
    Memo memo;
    if (!agree && !memo.device(o->sbuf) && !memo.device(o->rbuf)) return 0;
    DepthGuard dg;
    CommState *cs = nullptr;
    if (o->comm != MPI_COMM_NULL) cs = comm_state(o->comm);
    else if (o->kind != NM_OPK_MRECV) return 0;
    if (agree && cs->inter) return 0;

    BufRef b[2];
    int nb = op_buffers(o, cs, b);
    if (nb < 0) return 0;  // invalid arguments: the real MPI reports them, as without us
    Classified c = classify(b, nb, memo);
    if (!c.any_device && !agree) return 0;

    nm_route_in_t in = route_input(o, cs, c);
    nm_decision_t d = nm_route(&in);
    if (agree) {  // ranks may mix host and device buffers: NCCL only if every rank can
        int vote = d.route == NCCLMPI_ROUTE_NCCL, all = 0;
        PMPI_Allreduce(&vote, &all, 1, MPI_INT, MPI_MIN, o->comm);
        if (!all && d.route == NCCLMPI_ROUTE_NCCL) d = nm_decision_t{NCCLMPI_ROUTE_STAGED, NM_WHY_MIXED};
        if (d.route == NCCLMPI_ROUTE_HOST) return 0;
    }
    nm_status_t st = NM_OK;
    ProcessGroup *pg = nullptr;
    if (d.route == NCCLMPI_ROUTE_NCCL) {
        pg = cs->group(c.device, &st);
        if (!pg) d = nm_decision_t{NCCLMPI_ROUTE_STAGED, NM_WHY_COMM};
    }
    NM_TRACE(CALL, "MPI_%s %s count=%d/%d root=%d dev=%d -> %s (%s)%s", nm_fn_names[o->fn],
             cs ? cs->describe().c_str() : "", o->scount, o->rcount, o->root, c.device, nm_route_str(d.route),
             nm_why_str(d.why), pg ? pg->describe().c_str() : "");
    NM_COUNT_ROUTE(o->fn, d.route);
    if (d.route == NCCLMPI_ROUTE_STAGED) note_staged(o, d.why);

    switch (d.route) {
    case NCCLMPI_ROUTE_NCCL: {
        Task *t = (o->flags & NM_OPF_NB) ? new Task(o, pg) : nullptr;
        st = coll_nccl(*pg, o, t);
        if (st != NM_OK) {
            delete t;
            *rc = raise_error(o, st, "NCCL operation failed");
            return 1;
        }
        *rc = t ? t->publish(o->req) : MPI_SUCCESS;
        return 1;
    }
    case NCCLMPI_ROUTE_STAGED: {
        if (!c.any_host && stage_pipeline_applies(o)) {
            st = stage_pipelined(o, cs, c.device, rc);
            if (st != NM_OK) *rc = raise_error(o, st, "pipelined staging failed");
            return 1;
        }
        Stage *s = nullptr;
        st = stage_in(o, b, nb, &s);
        if (st != NM_OK) {
            *rc = raise_error(o, st, "staging to host failed");
            return 1;
        }
        return 0;  // the wrapper calls the real MPI on the host shadows, then nm_leave
    }
    case NCCLMPI_ROUTE_ERROR:
        *rc = raise_error(o, d.why == NM_WHY_PERSISTENT ? NM_ERR_UNSUPPORTED : NM_ERR_BUFFER, nm_why_str(d.why));
        return 1;
    default:
        return 0;
    }
}

extern "C" int nm_leave_slow(nm_op_t *o, int rc)
{
    Stage *s = reinterpret_cast<Stage *>(o->stage);
    o->flags &= ~NM_OPF_STAGED;
    if (rc != MPI_SUCCESS) {
        stage_release(s);
        return rc;
    }
    DepthGuard dg;
    if (o->flags & NM_OPF_NB) {  // the copy back waits for the real MPI's request
        Task *t = new Task(o, nullptr);
        t->set_inner(*o->req, s);
        return t->publish(o->req);
    }
    nm_status_t st = stage_finish(s);
    stage_release(s);
    return st == NM_OK ? rc : raise_error(o, st, "copy back to the device failed");
}

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
    finalized = true;
    DepthGuard dg;
    tasks_drain();
    if (cuda_attached()) {
        comm_states_teardown();
        pinned_trim();
    }
    if (nm_cfg.STATS) ncclmpi_print_stats();
}

extern "C" void nm_comm_created(MPI_Comm parent, MPI_Comm newcomm)
{
    if (depth || nm_cfg.DISABLE || !cuda_attached() || !initialized || finalized) return;
    DepthGuard dg;
    comm_state_created(parent, newcomm);
}

extern "C" __attribute__((visibility("default"))) const char *ncclmpi_version(void)
{
    return PACKAGE_VERSION " (NCCL " NM_NCCL_BUILD_VERSION " headers)";
}
