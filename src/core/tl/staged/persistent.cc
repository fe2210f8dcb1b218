// ncclmpi: persistent requests on device buffers (see persistent.h).
#include "core/tl/staged/persistent.h"

#include <limits.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/p2p/neighbor.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "route/route.h"
#include "util/handle_map.h"
#include "util/log.h"

namespace ncclmpi {

namespace {

// A persistent request whose application's request receives from ncclmpi's private communicator
// (tag `key`):
// - a persistent receive on host memory on a communicator that may carry envelopes: each start
//   posts ncclmpi's own receive on the application's communicator (or takes a message a probe
//   already took out of matching), decodes what it got and forwards it there (see envelope.h);
// - a restarted call (restart, persistent.h): each start runs `call`, the nonblocking form, and
//   forwards no bytes once it completed; the status is what `call` got.
struct Emul {
    int src, tag;
    MPI_Comm comm;
    int key;
    char *tmp = nullptr;
    size_t cap = 0;                      // the receive's packed size; tmp holds cap + 1
    MPI_Request inner = MPI_REQUEST_NULL;  // ncclmpi's receive (restart: its call's request), then the forward to itself
    MPI_Request fwd = MPI_REQUEST_NULL;
    MPI_Status got;                      // what the receive got (source and tag for the status)
    // restart only
    bool restart = false;
    nm_op_t call;                        // the nonblocking form (its request: inner)
    MPI_Datatype dup = MPI_DATATYPE_NULL;  // call's own reference to a derived type
    MPI_Datatype rdup = MPI_DATATYPE_NULL; // (a collective's receive type)
    bool posted = false;                 // this activation's call runs (inner, until it completed)
    int err = MPI_SUCCESS;               // how it ended (got: what it got)
    bool err_reported = false;           // (a handler saw err already)
    std::vector<int> arrays;             // call's count and displacement arrays (keep_arrays)
    std::vector<MPI_Datatype> stypes, rtypes, type_dups;  // its datatype arrays, and their duplicates
    std::vector<MPI_Aint> sadispls, radispls;  // its byte displacements (MPI_Neighbor_alltoallw)
};

// Keys on the private communicator (envelope.h: below NM_SELF_KEY0 are fabricated messages').
std::atomic<int> next_key{0};
int key_new() { return NM_SELF_KEY0 + next_key.fetch_add(1, std::memory_order_relaxed) % (0x3fffffff - NM_SELF_KEY0); }

// The nonblocking collective a persistent one's start runs (route: nm_pers_coll_restarts), or -1:
// the table's first nonblocking row of that kind (MPI_Iallreduce for MPI_Allreduce_init; a
// large-count row comes later in the table)
int coll_nb_fn(int kind)
{
    static const struct { int kind; bool nb; } rows[] = {
#define NM_NB_0 false
#define NM_NB_NB true
#define NM_NB_PERS false
#define NM_NB_CORE false
#define NM_ROW_KIND(name, path, k, flags) {NM_OPK_##k, NM_NB_##flags},
        NM_FN_TABLE(NM_ROW_KIND)
#undef NM_ROW_KIND
#undef NM_NB_0
#undef NM_NB_NB
#undef NM_NB_PERS
#undef NM_NB_CORE
    };
    static_assert(sizeof(rows) / sizeof(rows[0]) == NM_FN_COUNT, "the table's rows are nm_fn_t's order");
    for (size_t f = 0; f < sizeof(rows) / sizeof(rows[0]); f++)
        if (rows[f].nb && rows[f].kind == kind) return (int)f;
    return -1;
}

// A derived type *t becomes the request's own duplicate *dup (named types stay).
void keep_type(MPI_Datatype *t, MPI_Datatype *dup)
{
    if (*t == MPI_DATATYPE_NULL) return;
    int ni, na, nd, combiner = MPI_COMBINER_NAMED;
    PMPI_Type_get_envelope(*t, &ni, &na, &nd, &combiner);
    if (combiner != MPI_COMBINER_NAMED && PMPI_Type_dup(*t, dup) == MPI_SUCCESS) *t = *dup;
}

// Where restarted calls' requests receive their completions: the envelopes' private communicator
// where envelopes are on, else one of this file's own (a duplicate of MPI_COMM_SELF: local).
MPI_Comm restart_comm()
{
    if (env_on() && env_self_comm() != MPI_COMM_NULL) return env_self_comm();
    static std::once_flag once;
    static MPI_Comm own = MPI_COMM_NULL;
    std::call_once(once, [] { PMPI_Comm_dup(MPI_COMM_SELF, &own); });
    return own;
}


struct Pers {
    Stage *stage;
    MPI_Comm comm;  // whose error handler reports a failed copy
    bool active;    // started, not yet completed by a Wait or Test
    bool copied;    // this activation's copy back is done (MPI_Request_get_status did it)
    Emul *em;       // an emulated persistent receive (envelopes), or null
    Decode *decode; // a host receive that may get an envelope (not persistent: one completion), or null
    PersExt *ext = nullptr;  // what its starts and completions do beyond a plain staged request's (owned)
};

std::mutex mu;  // (taken only under MPI_THREAD_MULTIPLE: MtLock)
HandleMap<MPI_Request, Pers> table(MPI_REQUEST_NULL);
std::atomic<int> registered{0};  // table's size, read without the lock (most calls find none)
std::atomic<int> ndetached{0};   // detached's size, likewise
std::atomic<int> nemul{0};       // the table's emulated receives (pers_progress moves them along)
// freed while active: the real MPI's request (not freed yet, so that it can be tested) and stage
std::vector<std::pair<MPI_Request, Pers>> detached;

int copy_back(const Pers &p, MPI_Status *st)
{
    int cancelled = 0;
    if (st && st != MPI_STATUS_IGNORE) PMPI_Test_cancelled(st, &cancelled);
    if (cancelled || !p.stage) return MPI_SUCCESS;
    if (p.ext) return p.ext->complete(p.stage, p.comm);
    if (!stage_has_out(p.stage)) return MPI_SUCCESS;
    if (stage_finish(p.stage, st) == NM_OK) return MPI_SUCCESS;
    const char *msg = "ncclmpi: a persistent receive on device memory: the copy back to the device failed";
    NM_ERROR(STAGE, "%s", msg + 9);
    int code = nm_error_code(MPI_ERR_INTERN, msg);
    PMPI_Comm_call_errhandler(p.comm, code);
    return code;
}

// The receive of an emulated persistent request got its message (code rc, status st): decode it
// and forward it to the application's request (cap + 1 bytes when it does not fit, so that the
// application's receive reports the truncation).
void em_forward(Emul *em, int rc, MPI_Status *st)
{
    em->got = *st;
    MPI_Count n = 0;
    PMPI_Get_elements_x(st, MPI_BYTE, &n);
    bool direct = false;
    if (rc == MPI_SUCCESS) rc = env_finish_bytes(em->tmp, em->cap + 1, st, nullptr, &direct);
    if (rc == MPI_SUCCESS) PMPI_Get_elements_x(st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS || n < 0 || (size_t)n > em->cap) n = (MPI_Count)em->cap + 1;
    PMPI_Isend(em->tmp, (int)n, MPI_PACKED, 0, em->key, env_self_comm(), &em->fwd);
}

// A restarted call's activation (app: the application's request) completed: its outcome kept for
// the status, the application's request completed by a forward (or cancelled with it). (mu held)
void restart_done(MPI_Request app, Emul *em, const MPI_Status &st, int err, bool reported)
{
    em->posted = false;
    em->got = st;
    em->err = err;
    em->err_reported = reported;
    int cancelled = 0;
    if (err == MPI_SUCCESS) PMPI_Test_cancelled(&st, &cancelled);
    if (cancelled) {  // (a receive, or a send the real MPI could cancel): the application's too
        if (app != MPI_REQUEST_NULL) PMPI_Cancel(&app);
        return;
    }
    PMPI_Isend(nullptr, 0, MPI_BYTE, 0, em->key, restart_comm(), &em->fwd);
}

// Moves a restarted call along: its request completed -> restart_done. (mu held)
void restart_progress(MPI_Request app, Emul *em)
{
    if (!em->posted) return;
    MPI_Status st;
    int err;
    bool reported;
    if (own_request_done(&em->inner, &st, &err, &reported)) restart_done(app, em, st, err, reported);
}

// The application's status of an emulated request's completion: the source and tag its receive
// got; a restarted call's count too (none when it failed; unless cancelled: then the real MPI's
// status says so).
void em_status(const Emul &em, MPI_Status *st)
{
    st->MPI_SOURCE = em.got.MPI_SOURCE;
    st->MPI_TAG = em.got.MPI_TAG;
    if (!em.restart) return;
    int cancelled = 0;
    MPI_Count n = 0;
    if (em.err == MPI_SUCCESS) {
        PMPI_Test_cancelled(&em.got, &cancelled);
        if (!cancelled) PMPI_Get_elements_x(&em.got, MPI_BYTE, &n);
    }
    if (!cancelled) PMPI_Status_set_elements_x(st, MPI_BYTE, n == MPI_UNDEFINED ? 0 : n);
}

// Moves an emulated receive along: its receive completed -> forwarded. (mu held)
void em_progress(MPI_Request app, Emul *em)
{
    if (em && em->restart) return restart_progress(app, em);
    if (!em || em->inner == MPI_REQUEST_NULL) return;
    int flag = 0;
    MPI_Status st;
    int rc = PMPI_Test(&em->inner, &flag, &st);
    if (!flag && rc == MPI_SUCCESS) return;
    em->inner = MPI_REQUEST_NULL;
    int cancelled = 0;
    PMPI_Test_cancelled(&st, &cancelled);
    if (!cancelled) em_forward(em, rc, &st);
}

void release(Pers &p)
{
    if (p.em) {
        if (p.em->fwd != MPI_REQUEST_NULL) PMPI_Wait(&p.em->fwd, MPI_STATUS_IGNORE);
        free(p.em->tmp);
        if (p.em->dup != MPI_DATATYPE_NULL) PMPI_Type_free(&p.em->dup);
        if (p.em->rdup != MPI_DATATYPE_NULL) PMPI_Type_free(&p.em->rdup);
        for (MPI_Datatype &d : p.em->type_dups) PMPI_Type_free(&d);
        delete p.em;
    }
    if (p.stage) stage_release(p.stage);
    delete p.ext;
    decode_free(p.decode);
    __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
}

// A host receive that may have got an envelope completed with status st (null: it failed, nothing
// to decode): its payload pulled (unless MPI_Request_get_status did it), its entry released.
int decode_done(Pers &p, MPI_Status *st)
{
    const int rc = st ? env_finish(*p.decode, st) : MPI_SUCCESS;
    release(p);
    // (MPI_Imrecv: the message's communicator is not known here; the code is returned. Decoded by
    // MPI_Request_get_status: its error went to the handler there.)
    if (rc != MPI_SUCCESS && p.comm != MPI_COMM_NULL && !p.copied) PMPI_Comm_call_errhandler(p.comm, rc);
    return rc;
}

void insert(MPI_Request req, const Pers &p)
{
    MtLock<std::mutex> g(mu);
    table[req] = p;
    registered.store((int)table.size(), std::memory_order_release);
    if (p.em) nemul.fetch_add(1, std::memory_order_relaxed);
    // the Start, Wait and Test wrappers take their slow path while one exists
    __atomic_add_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
}

}  // namespace

void pers_register(MPI_Request req, Stage *s, MPI_Comm comm, PersExt *ext)
{
    insert(req, Pers{s, comm, false, false, nullptr, nullptr, ext});
}

PersExt *pers_ext(MPI_Request req, Stage **s, bool *active)
{
    if (registered.load(std::memory_order_acquire) == 0) return nullptr;
    MtLock<std::mutex> g(mu);
    Pers *it = table.find(req);
    if (!it || !it->ext) return nullptr;
    *s = it->stage;
    *active = it->active;
    return it->ext;
}

void pers_watch_decode(MPI_Request req, Decode *d, MPI_Comm comm)
{
    insert(req, Pers{nullptr, comm, true, false, nullptr, d});
}

bool pers_owns(int n, const MPI_Request *reqs)
{
    if (registered.load(std::memory_order_acquire) == 0) return false;
    MtLock<std::mutex> g(mu);
    for (int i = 0; i < n; i++)
        if (table.find(reqs[i])) return true;
    return false;
}

int pers_start(int n, const MPI_Request *reqs, bool *restarts)
{
    *restarts = false;
    for (int i = 0; i < n; i++) {
        Stage *s = nullptr;
        PersExt *ext = nullptr;
        {
            MtLock<std::mutex> g(mu);
            Pers *it = table.find(reqs[i]);
            if (!it) continue;
            ext = it->ext;
            if (it->em && it->em->restart) {  // after the real MPI started it: pers_restart_post
                *restarts = true;
                continue;
            }
            it->active = true;
            it->copied = false;
            s = it->stage;
            if (Emul *em = it->em) {  // ncclmpi's receive on the application's communicator
                if (em->fwd != MPI_REQUEST_NULL) PMPI_Wait(&em->fwd, MPI_STATUS_IGNORE);  // the last one's
                MPI_Status st;
                int rc = MPI_SUCCESS;
                if (env_recv_bytes(em->comm, em->src, em->tag, em->tmp, em->cap + 1, &em->inner, &st, &rc)) em_forward(em, rc, &st);
                else if (rc != MPI_SUCCESS) return rc;
                if (!s) continue;  // host memory: nothing to copy in
            }
        }
        if (ext && !ext->start(s)) continue;
        if (stage_copy_in(s) != NM_OK) {
            const char *msg = "ncclmpi: MPI_Start: the copy of a persistent send's device buffer to the host failed";
            NM_ERROR(STAGE, "%s", msg + 9);
            return nm_error_code(MPI_ERR_INTERN, msg);
        }
    }
    return MPI_SUCCESS;
}

int pers_completed(MPI_Request req, MPI_Status *st, bool gone)
{
    Pers p{};
    int err = MPI_SUCCESS;  // a restarted call's failure (reported outside the lock: the handler may call MPI)
    bool reported = true;
    MPI_Comm ecomm = MPI_COMM_NULL;
    {
        MtLock<std::mutex> g(mu);
        Pers *it = table.find(req);
        if (!it || !it->active) return MPI_SUCCESS;
        if (it->decode) {  // one completion: the entry goes with the request
            if (!gone) return MPI_SUCCESS;
            p = *it;
            table.erase(req);
            registered.store((int)table.size(), std::memory_order_release);
        } else {
            if (!st) return MPI_SUCCESS;  // failed: nothing to copy back
            it->active = false;
            Emul *em = it->em;
            if (em) {  // the status of what ncclmpi's receive (or restarted call) got
                if (st != MPI_STATUS_IGNORE) em_status(*em, st);
                if (em->fwd != MPI_REQUEST_NULL) PMPI_Wait(&em->fwd, MPI_STATUS_IGNORE);
            }
            if (em && em->restart) {  // nothing to copy back
                if (em->err == MPI_SUCCESS) return MPI_SUCCESS;
                err = em->err;
                reported = em->err_reported;
                em->err_reported = true;
                ecomm = em->comm;
            } else {
                if (it->copied) return MPI_SUCCESS;
                p = *it;
            }
        }
    }
    if (err != MPI_SUCCESS) {
        if (st != MPI_STATUS_IGNORE) st->MPI_ERROR = err;
        if (!reported) PMPI_Comm_call_errhandler(ecomm, err);
        return err;
    }
    return p.decode ? decode_done(p, st) : copy_back(p, st);
}

int pers_recv_init_envelope(nm_op_t *o, Stage *s, void *target)
{
    Emul *em = new Emul;
    em->src = o->rpeer;
    em->tag = o->rtag;
    em->comm = o->comm;
    em->key = key_new();
    // the receive's bytes, forwarded to itself as MPI_PACKED (an int count, one byte more to see
    // a longer message): above that a clear MPI_ERR_COUNT, never a wrapped count
    const DtypeInfo *di = dtype_info(o->rtype);
    const size_t bytes = di && o->rcount > 0 ? (size_t)o->rcount * di->size : 0;
    int packed = 0;
    if (!nm_int_fits((unsigned long long)bytes + 1, nullptr) || PMPI_Pack_size(o->rcount, o->rtype, o->comm, &packed) != MPI_SUCCESS ||
        packed < 0 || packed == INT_MAX) {
        delete em;
        if (s) stage_release(s);
        return nm_raise_error(o->fn, NM_ERR_COUNT,
                              "a persistent receive of more than 2^31-2 bytes on a communicator that may carry envelopes "
                              "(NCCLMPI_P2P_ENVELOPE): its emulation forwards the bytes with an int count",
                              o->comm);
    }
    em->cap = (size_t)packed;
    em->tmp = (char *)malloc(em->cap + 1);
    int rc = PMPI_Recv_init(target, o->rcount, o->rtype, 0, em->key, env_self_comm(), o->req);
    if (rc != MPI_SUCCESS || !em->tmp) {
        free(em->tmp);
        delete em;
        if (s) stage_release(s);
        return rc != MPI_SUCCESS ? rc : MPI_ERR_NO_MEM;
    }
    insert(*o->req, Pers{s, o->comm, false, false, em, nullptr});
    return MPI_SUCCESS;
}

bool pers_restart_applies(const nm_op_t *o)
{
    if (!(o->flags & NM_OPF_PERS)) return false;
    if (nm_opkind_is_coll(o->kind) || (nm_opk(o->kind) & NM_KF_NEIGH))
        return nm_pers_coll_restarts(o->kind) != 0;  // (route: NM_WHY_PERSISTENT_START)
    if (!env_on()) return false;
    const bool send = o->kind == NM_OPK_SEND && o->fn != NM_FN_Bsend_init;  // (buffered: stays staged)
    if (!send && o->kind != NM_OPK_RECV) return false;
    return (send ? o->peer : o->rpeer) != MPI_PROC_NULL && env_comm(o->comm);
}

// The count, displacement and datatype arrays of a persistent collective's call, copied into em
// (derived types in them kept by a duplicate each): the MPI library consumes them at the _init
// call, so applications (and mpi4py's large-count forms, which free their converted arrays when the
// _init returns) need not keep them, while each start of the nonblocking form reads them again.
// Only the arrays the call reads on this rank: a v form's at its root only (rooted kinds), a send
// side's not when it is MPI_IN_PLACE; one entry per rank of the group the call addresses (the
// remote group on an intercommunicator; Reduce_scatter: the local one; a neighbourhood
// collective: one per neighbour, its in-degree for the receive side, its out-degree for the send).
static void keep_arrays(Emul *em)
{
    nm_op_t &c = em->call;
    if (!c.scounts && !c.sdispls && !c.rcounts && !c.rdispls && !c.sadispls && !c.radispls && !c.stypes && !c.rtypes)
        return;  // (a form of scalar counts, or a point-to-point call)
    int n = 0, inter = 0, rank = -1;
    PMPI_Comm_test_inter(c.comm, &inter);
    if (inter && c.kind != NM_OPK_REDUCE_SCATTER) PMPI_Comm_remote_size(c.comm, &n);
    else PMPI_Comm_size(c.comm, &n);
    PMPI_Comm_rank(c.comm, &rank);
    int ns = n, nr = n;  // the send side's entries and the receive side's
    if (nm_opk(c.kind) & NM_KF_NEIGH) neigh_degrees(c.comm, &nr, &ns);  // (its out- and in-degree)
    const bool root = inter ? c.root == MPI_ROOT : c.root == rank;
    const bool send = c.sbuf != MPI_IN_PLACE && (c.kind != NM_OPK_SCATTERV || root);
    const bool recv = c.kind != NM_OPK_GATHERV || root;
    const int **arr[] = {send ? &c.scounts : nullptr, send ? &c.sdispls : nullptr, recv ? &c.rcounts : nullptr,
                         recv ? &c.rdispls : nullptr};
    const int len[] = {ns, ns, nr, nr};
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += arr[i] && *arr[i] ? (size_t)len[i] : 0;
    em->arrays.resize(total);
    int *dst = em->arrays.data();
    for (int i = 0; i < 4; i++)
        if (arr[i] && *arr[i]) {
            std::copy(*arr[i], *arr[i] + len[i], dst);
            *arr[i] = dst;
            dst += len[i];
        }
    // (MPI_Neighbor_alltoallw: byte displacements of type MPI_Aint)
    const MPI_Aint **aarr[] = {send ? &c.sadispls : nullptr, recv ? &c.radispls : nullptr};
    for (int i = 0; i < 2; i++)
        if (aarr[i] && *aarr[i]) {
            std::vector<MPI_Aint> &v = i == 0 ? em->sadispls : em->radispls;
            v.assign(*aarr[i], *aarr[i] + (i == 0 ? ns : nr));
            *aarr[i] = v.data();
        }
    const MPI_Datatype **types[] = {send ? &c.stypes : nullptr, recv ? &c.rtypes : nullptr};
    for (const MPI_Datatype **t : types)
        if (t && *t) {
            std::vector<MPI_Datatype> &v = t == types[0] ? em->stypes : em->rtypes;
            v.assign(*t, *t + (t == types[0] ? ns : nr));
            for (MPI_Datatype &d : v) {
                MPI_Datatype dup = MPI_DATATYPE_NULL;
                keep_type(&d, &dup);
                if (dup != MPI_DATATYPE_NULL) em->type_dups.push_back(dup);
            }
            *t = v.data();
        }
}

int pers_restart_init(nm_op_t *o)
{
    // the real MPI checks the arguments on the application's communicator (its handler reports a
    // bad one, as without ncclmpi); the check's request is never started
    MPI_Request check = MPI_REQUEST_NULL;
    nm_op_t c = *o;
    c.req = &check;
    int rc = nm_real_fns[o->fn](&c);
    if (rc != MPI_SUCCESS) return rc;
    PMPI_Request_free(&check);
    const bool coll = nm_opkind_is_coll(o->kind) || (nm_opk(o->kind) & NM_KF_NEIGH);
    const int nbfn = coll ? coll_nb_fn(o->kind) : o->fn == NM_FN_Recv_init ? NM_FN_Irecv
                                                : o->fn == NM_FN_Ssend_init ? NM_FN_Issend
                                                : o->fn == NM_FN_Rsend_init ? NM_FN_Irsend
                                                                            : NM_FN_Isend;
    if (nbfn < 0) return MPI_ERR_INTERN;  // (nm_pers_coll_restarts and coll_nb_fn disagree)
    Emul *em = new Emul;
    em->restart = true;
    em->comm = o->comm;
    em->key = key_new();
    em->call = *o;
    em->call.fn = (uint16_t)nbfn;
    em->call.flags = NM_OPF_NB | NM_OPF_TASK;
    em->call.req = nullptr;
    em->call.status = nullptr;
    em->call.stage = nullptr;
    em->call.info = MPI_INFO_NULL;
    // the application may free a derived type after the call; the request keeps its own
    keep_arrays(em);
    if (coll) {
        keep_type(&em->call.stype, &em->dup);
        keep_type(&em->call.rtype, &em->rdup);
    } else {
        keep_type(o->kind == NM_OPK_RECV ? &em->call.rtype : &em->call.stype, &em->dup);
    }
    rc = PMPI_Recv_init(nullptr, 0, MPI_BYTE, 0, em->key, restart_comm(), o->req);
    if (rc != MPI_SUCCESS) {
        if (em->dup != MPI_DATATYPE_NULL) PMPI_Type_free(&em->dup);
        if (em->rdup != MPI_DATATYPE_NULL) PMPI_Type_free(&em->rdup);
        for (MPI_Datatype &d : em->type_dups) PMPI_Type_free(&d);
        delete em;
        return rc;
    }
    insert(*o->req, Pers{nullptr, o->comm, false, false, em, nullptr});
    return MPI_SUCCESS;
}

int pers_restart_post(int n, const MPI_Request *reqs)
{
    int first = MPI_SUCCESS;
    for (int i = 0; i < n; i++) {
        Emul *em = nullptr;
        {
            MtLock<std::mutex> g(mu);
            Pers *it = table.find(reqs[i]);
            if (!it || !it->em || !it->em->restart) continue;
            em = it->em;
            if (em->fwd != MPI_REQUEST_NULL) PMPI_Wait(&em->fwd, MPI_STATUS_IGNORE);  // (the last activation's)
            it->active = true;
            it->copied = false;
        }
        // the nonblocking form, as the application's own call would run (outside the lock: it may
        // progress ncclmpi's requests, these among them)
        MPI_Request r = MPI_REQUEST_NULL;
        nm_op_t o = em->call;
        o.req = &r;
        int rc = MPI_SUCCESS;
        if (!nm_enter(&o, &rc)) rc = nm_real_fns[o.fn](&o);
        MtLock<std::mutex> g(mu);
        if (rc == MPI_SUCCESS) {
            em->inner = r;
            em->posted = true;
            continue;
        }
        // failed (its handler called): the application's request completes with the error
        if (first == MPI_SUCCESS) first = rc;
        MPI_Status st;
        int none;
        bool reported;
        r = MPI_REQUEST_NULL;
        own_request_done(&r, &st, &none, &reported);  // (an empty status)
        restart_done(reqs[i], em, st, rc, true);
    }
    return first;
}

int pers_cancel(MPI_Request req, int *rc)
{
    Emul *em = nullptr;
    {
        MtLock<std::mutex> g(mu);
        Pers *it = table.find(req);
        if (!it || !it->em) return 0;
        em = it->em;
        if (em->restart) {
            // its call is asked to cancel (a task passes it to the real MPI's request); whether it
            // was, its completion tells (restart_done cancels the application's request with it)
            if (!em->posted) return 0;  // (not started, or done: the real MPI answers as for its own)
            if (em->inner != MPI_REQUEST_NULL) {
                MPI_Request r = em->inner;
                *rc = PMPI_Cancel(&r);
            } else {
                *rc = MPI_SUCCESS;
            }
            return 1;
        }
    }
    if (em->inner == MPI_REQUEST_NULL) return 0;  // its message came: the cancel fails, as MPI allows
    MPI_Status st;
    PMPI_Cancel(&em->inner);
    int wrc = PMPI_Wait(&em->inner, &st);
    em->inner = MPI_REQUEST_NULL;
    int cancelled = 0;
    PMPI_Test_cancelled(&st, &cancelled);
    if (!cancelled) {  // matched first: it completes normally
        em_forward(em, wrc, &st);
        *rc = MPI_SUCCESS;
        return 1;
    }
    MPI_Request r = req;
    *rc = PMPI_Cancel(&r);  // the application's request never gets a message: cancel it
    return 1;
}

int pers_free(MPI_Request *req, int *rc)
{
    std::unique_lock<std::mutex> g(mu);
    Pers *it = table.find(*req);
    if (!it) return 0;
    Pers p = *it;
    table.erase(*req);
    registered.store((int)table.size(), std::memory_order_release);
    if (p.em) nemul.fetch_sub(1, std::memory_order_relaxed);
    if (p.active) {  // completes in the background: tested by pers_progress, then freed
        detached.emplace_back(*req, p);
        ndetached.store((int)detached.size(), std::memory_order_release);
        *req = MPI_REQUEST_NULL;
        *rc = MPI_SUCCESS;
        return 1;
    }
    g.unlock();
    *rc = PMPI_Request_free(req);
    release(p);
    return 1;
}

void pers_progress()
{
    struct Done {
        MPI_Request req;
        Pers p;
        MPI_Status st;
    };
    if (nemul.load(std::memory_order_acquire) == 0 && ndetached.load(std::memory_order_acquire) == 0) return;
    std::vector<Done> done;
    {
        std::unique_lock<std::mutex> g(mu, std::try_to_lock);
        if (!g.owns_lock()) return;
        if (nemul.load(std::memory_order_relaxed))  // (most entries are not: not looked through)
            table.for_each([](MPI_Request r, Pers &e) {
                if (e.active) em_progress(r, e.em);
            });
        for (auto &d : detached) em_progress(d.first, d.second.em);
        if (detached.empty()) return;
        for (size_t i = 0; i < detached.size();) {
            int flag = 0;
            MPI_Status st;
            PMPI_Test(&detached[i].first, &flag, &st);
            if (flag) {
                done.push_back(Done{detached[i].first, detached[i].second, st});
                detached[i] = detached.back();
                detached.pop_back();
                ndetached.store((int)detached.size(), std::memory_order_release);
            } else {
                i++;
            }
        }
    }
    for (auto &d : done) {  // outside the lock: the copy waits for the GPU
        if (d.p.decode) {  // (not persistent: the Test freed it)
            decode_done(d.p, &d.st);
            continue;
        }
        if (!d.p.copied) copy_back(d.p, &d.st);
        PMPI_Request_free(&d.req);
        release(d.p);
    }
}

void pers_drain()
{
    // a receive freed while active whose message never comes would hold MPI_Finalize for good:
    // it gets a few seconds, then a warning
    const double t0 = nm_now_s();
    for (;;) {
        size_t left;
        {
            MtLock<std::mutex> g(mu);
            left = detached.size();
        }
        if (!left) return;
        if (nm_now_s() - t0 > 5.0) {
            NM_WARN(STAGE, "MPI_Finalize: %zu persistent request(s) on device buffers, freed while active, never "
                    "completed; their data is not copied back", left);
            return;
        }
        pers_progress();
        sched_yield();
    }
}

}  // namespace ncclmpi

using namespace ncclmpi;

namespace {
// this table's requests, moved along, drained and completed by the tasks' calls (task.h)
const RequestTable pers_table{pers_progress, pers_drain, pers_owns, pers_completed};
struct PersTableRegistered {
    PersTableRegistered() { tasks_set_request_table(&pers_table); }
} pers_table_registered;
}  // namespace

extern "C" int nm_pers_start(MPI_Request *request, int *rc) { return nm_pers_startall(1, request, rc); }

extern "C" int nm_pers_startall(int count, MPI_Request reqs[], int *rc)
{
    nm_flush();  // a start may be waited on: nothing stays queued behind it
    if (count <= 0 || !reqs) return 0;
    bool restarts = false;
    int e = pers_start(count, reqs, &restarts);
    if (e != MPI_SUCCESS) {
        PMPI_Comm_call_errhandler(MPI_COMM_WORLD, e);
        *rc = e;
        return 1;
    }
    if (!restarts) return 0;  // the wrapper starts them
    // the real MPI starts them all (and checks them), then the restarted calls run
    *rc = PMPI_Startall(count, reqs);
    if (*rc == MPI_SUCCESS) *rc = pers_restart_post(count, reqs);
    return 1;
}

extern "C" int nm_pers_cancel(MPI_Request *request, int *rc)
{
    nm_flush();
    return request && pers_owns(1, request) && pers_cancel(*request, rc);
}

extern "C" int nm_pers_request_free(MPI_Request *request, int *rc)
{
    nm_flush();
    return request && pers_free(request, rc);
}

namespace {

// MPI_Request_get_status (or one of its MPI-4.1 siblings) found `request` complete, its status
// in *st: a staged persistent request is still active, and its data is the application's now, so
// it is copied back now (once). *rc: the call's result so far, then the copy's.
void status_found(MPI_Request request, MPI_Status *st, int *rc)
{
    Pers p{};
    MPI_Comm ecomm = MPI_COMM_NULL;  // a restarted call's failure, reported once, outside the lock
    {
        MtLock<std::mutex> g(mu);
        Pers *it = table.find(request);
        if (!it || !it->active) return;
        if (it->em) em_status(*it->em, st);
        if (it->em && it->em->restart) {  // nothing to copy back
            Emul &em = *it->em;
            if (em.err == MPI_SUCCESS) return;
            st->MPI_ERROR = *rc = em.err;
            if (!em.err_reported) ecomm = em.comm;
            em.err_reported = true;  // (the completion returns it again, unreported)
        } else {
            if (it->copied && !it->decode) return;
            p = *it;
            it->copied = true;
        }
    }
    if (ecomm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(ecomm, *rc);
    if (!p.stage && !p.decode) return;  // (a restarted call: nothing more)
    if (p.decode) {  // decoded by the first call that finds it complete; every later one, and the
        Decode *d = p.decode;  // completion, report what that one did (the preset)
        *rc = env_finish(*d, st);
        if (p.copied) return;
        d->preset = *st;
        d->preset_rc = *rc;
        d->has_preset = true;
        if (*rc != MPI_SUCCESS && p.comm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(p.comm, *rc);
        return;
    }
    *rc = copy_back(p, st);
}

#if defined(NM_HAVE_FN_Request_get_status_all) || defined(NM_HAVE_FN_Request_get_status_some)
// status_found for n requests the real MPI reported complete: reqs[which[k]] (which null: reqs[k])
// with status st[k]; the first copy's failure becomes *rc where the call succeeded
void statuses_found(const MPI_Request *reqs, const int *which, int n, MPI_Status *st, int *rc)
{
    for (int k = 0; k < n && (*rc == MPI_SUCCESS || *rc == MPI_ERR_IN_STATUS); k++) {
        int one = MPI_SUCCESS;
        status_found(reqs[which ? which[k] : k], &st[k], &one);
        if (one != MPI_SUCCESS && *rc == MPI_SUCCESS) *rc = one;
    }
}
#endif

}  // namespace

extern "C" int nm_pers_request_get_status(MPI_Request request, int *flag, MPI_Status *status, int *rc)
{
    nm_progress();
    if (!pers_owns(1, &request)) return 0;
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    *rc = PMPI_Request_get_status(request, flag, st);
    if (*rc == MPI_SUCCESS && *flag) status_found(request, st, rc);
    return 1;
}

#ifdef NM_HAVE_FN_Request_get_status_any
// The MPI-4.1 forms: the real MPI's answer, then status_found for each request it found complete
extern "C" int nm_pers_request_get_status_any(int count, const MPI_Request *reqs, int *indx, int *flag, MPI_Status *status,
                                              int *rc)
{
    nm_progress();
    if (count <= 0 || !reqs || !pers_owns(count, reqs)) return 0;
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    *rc = PMPI_Request_get_status_any(count, reqs, indx, flag, st);
    if (*rc == MPI_SUCCESS && *flag && *indx >= 0 && *indx < count) status_found(reqs[*indx], st, rc);
    return 1;
}
#endif

#ifdef NM_HAVE_FN_Request_get_status_all
extern "C" int nm_pers_request_get_status_all(int count, const MPI_Request *reqs, int *flag, MPI_Status *statuses, int *rc)
{
    nm_progress();
    if (count <= 0 || !reqs || !pers_owns(count, reqs)) return 0;
    std::vector<MPI_Status> own(statuses == MPI_STATUSES_IGNORE ? (size_t)count : 0);
    MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? own.data() : statuses;
    *rc = PMPI_Request_get_status_all(count, reqs, flag, st);
    if (*flag) statuses_found(reqs, nullptr, count, st, rc);
    return 1;
}
#endif

#ifdef NM_HAVE_FN_Request_get_status_some
extern "C" int nm_pers_request_get_status_some(int incount, const MPI_Request *reqs, int *outcount, int *indices,
                                               MPI_Status *statuses, int *rc)
{
    nm_progress();
    if (incount <= 0 || !reqs || !pers_owns(incount, reqs)) return 0;
    std::vector<MPI_Status> own(statuses == MPI_STATUSES_IGNORE ? (size_t)incount : 0);
    MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? own.data() : statuses;
    *rc = PMPI_Request_get_status_some(incount, reqs, outcount, indices, st);
    if (*outcount != MPI_UNDEFINED) statuses_found(reqs, indices, *outcount, st, rc);
    return 1;
}
#endif
