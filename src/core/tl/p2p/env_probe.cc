// ncclmpi: the envelopes' probe queue: probes, receives it serves, the receive gate, freed comms.
#include "core/tl/p2p/env_internal.h"

#include <sched.h>

#include <climits>

#include <algorithm>
#include <cstring>
#include <shared_mutex>

#include "core/comm/comm_state.h"
#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/log.h"

#if NM_BUILD_HAVE_COMM_IS_REVOKED
extern "C" int PMPIX_Comm_is_revoked(MPI_Comm comm, int *flag);  // (Open MPI's <mpi-ext.h>)
#endif

namespace ncclmpi {

using namespace env;

MPI_Comm env::self_comm = MPI_COMM_NULL;  // fabricated message handles come from here

namespace {

// Messages a probe took out of the real MPI's matching, per communicator, in the order they
// arrived from each source (see probe() below): a raw message not received yet (its real handle), an
// envelope, or a raw message of the envelope's size already received (its bytes).
struct Entry {
    enum Kind { HANDLE, ENV, BYTES } kind;
    int src, tag;
    MPI_Count count;    // the message's size as the status reports it
    MPI_Message msg;    // HANDLE
    Envelope env;       // ENV
    char bytes[NM_ENV_WIRE + 3];  // BYTES
};
std::mutex qmu;
std::unordered_map<MPI_Comm, std::vector<Entry>> queues;
std::atomic<int> queued{0};
std::unordered_map<MPI_Message, Entry> fabricated;
std::shared_mutex gate;  // the receive gate (envelope.h): drains alone, receives' looks and posts together

// A scope that holds the gate shared (MPI_THREAD_MULTIPLE, unless this thread holds it already)
struct GateShared {
    const bool mine = nm_thread_multiple && !nm_env_gate;
    GateShared()
    {
        if (mine) gate.lock_shared();
    }
    ~GateShared()
    {
        if (mine) gate.unlock_shared();
    }
};

bool matches(const Entry &e, int src, int tag)
{
    return (src == MPI_ANY_SOURCE || src == e.src) && (tag == MPI_ANY_TAG || tag == e.tag);
}

// The first queued message of comm that (src, tag) matches, taken out when `take`.
bool queue_find(MPI_Comm comm, int src, int tag, bool take, Entry *out)
{
    if (queued.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> g(qmu);
    auto it = queues.find(comm);
    if (it == queues.end()) return false;
    auto &v = it->second;
    for (size_t i = 0; i < v.size(); i++)
        if (matches(v[i], src, tag)) {
            *out = v[i];
            if (take) {
                v.erase(v.begin() + (long)i);
                queued.fetch_sub(1, std::memory_order_release);
            }
            return true;
        }
    return false;
}

void fill_status(MPI_Status *st, const Entry &e)
{
    if (!st || st == MPI_STATUS_IGNORE) return;
    st->MPI_SOURCE = e.src;
    st->MPI_TAG = e.tag;  // (MPI_ERROR as it was: a probe leaves it, MPI-4.1 3.2.5)
    PMPI_Status_set_elements_x(st, MPI_BYTE, e.count);
    PMPI_Status_set_cancelled(st, 0);
}

}  // namespace

// A queued message into a receive buffer; *st its status. Returns an MPI code.
static int deliver(Entry &e, void *buf, int count, MPI_Datatype type, MPI_Comm comm, MPI_Status *st)
{
    if (e.kind == Entry::HANDLE) return PMPI_Mrecv(buf, count, type, &e.msg, st);
    const DtypeInfo *di = dtype_info(type);
    if (!di || count < 0) return MPI_ERR_TYPE;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(di, 0, count, &lo, &hi);
    const size_t cap = (size_t)count * di->size;
    int rc = MPI_SUCCESS;
    size_t n = 0;
    if (e.kind == Entry::ENV) {
        rc = pull_payload(e.env, (char *)buf + lo, cap, di->contig, buf, count, type, comm, &n, true);
    } else {  // the raw bytes, as the real MPI would have placed them
        n = std::min<size_t>(NM_ENV_WIRE, cap);
        if (di->contig) {
            memcpy((char *)buf + lo, e.bytes, n);
        } else {
            int pos = 0;
            PMPI_Unpack(e.bytes, (int)n, &pos, buf, di->size ? (int)(n / di->size) : 0, type, comm);
        }
        rc = NM_ENV_WIRE > cap ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
    }
    if (st && st != MPI_STATUS_IGNORE) {
        Entry shown = e;
        shown.count = (MPI_Count)n;
        fill_status(st, shown);
        st->MPI_ERROR = rc;
    }
    return rc;
}

// ---- probes ---------------------------------------------------------------------------------
// A probe that meets a message of the envelope's size must read it to report its size. Taking it
// alone out of matching would let it overtake older messages of its source with other tags (a
// later receive by MPI_ANY_TAG must get those first), so the messages of that source are taken
// out in their order, up to it: raw ones stay unreceived (their handles), envelopes are read.
static void queue_push(MPI_Comm comm, const Entry &e)
{
    std::lock_guard<std::mutex> g(qmu);
    queues[comm].push_back(e);
    queued.fetch_add(1, std::memory_order_release);
}

// The entry for a message taken out of matching (m, its status st): an envelope-sized one is read.
static Entry take(MPI_Message m, const MPI_Status &st)
{
    Entry e{};
    e.src = st.MPI_SOURCE;
    e.tag = st.MPI_TAG;
    e.count = status_bytes(&st);
    if (e.count == NM_ENV_WIRE) {
        PMPI_Mrecv(e.bytes, NM_ENV_WIRE, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        if (decode(e.bytes, &e.env)) {
            e.kind = Entry::ENV;
            e.count = (MPI_Count)e.env.bytes;
        } else {
            e.kind = Entry::BYTES;
        }
    } else {
        e.kind = Entry::HANDLE;
        e.msg = m;
    }
    return e;
}

static void drain(MPI_Comm comm, int src, int tag)
{
    comm_state(comm);  // (its delete callback drops what stays queued: env_comm_freed)
    // alone: no receive is between its look at the queue and its post (this thread holds no
    // share: a probe is never inside a receive's window)
    std::unique_lock<std::shared_mutex> alone(gate, std::defer_lock);
    if (nm_thread_multiple) alone.lock();
    for (;;) {
        int f = 0;
        MPI_Message m = MPI_MESSAGE_NULL;
        MPI_Status st;
        if (PMPI_Improbe(src, MPI_ANY_TAG, comm, &f, &m, &st) != MPI_SUCCESS || !f) return;
        const Entry e = take(m, st);
        queue_push(comm, e);
        if (e.tag == tag) return;  // the probed message (the first of its source with that tag)
    }
}

// A real message handle standing for a queued message (a zero-byte message to ourselves on a
// private duplicate of MPI_COMM_SELF, matched): MPI_Mrecv of it delivers the queued one.
static MPI_Message fabricate(const Entry &e)
{
    static std::atomic<int> seq{0};  // (threads: each its own tag, though equal ones would also do)
    const int tag = seq.fetch_add(1, std::memory_order_relaxed) % NM_SELF_KEY0;
    // nonblocking: a standard send may wait for its matching receive (MPICH 5.0.2's blocking send
    // of these zero bytes to itself did, for good: an MPI_Improbe of an envelope never returned);
    // the request completes when the handle is received, and is freed now
    MPI_Request r = MPI_REQUEST_NULL;
    PMPI_Isend(nullptr, 0, MPI_BYTE, 0, tag, self_comm, &r);
    MPI_Message m = MPI_MESSAGE_NULL;
    PMPI_Mprobe(0, tag, self_comm, &m, MPI_STATUS_IGNORE);
    PMPI_Request_free(&r);
    std::lock_guard<std::mutex> g(qmu);
    fabricated[m] = e;
    return m;
}

static int probe(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg, MPI_Status *status, bool blocking)
{
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    if (!blocking && !msg && queued.load(std::memory_order_acquire) == 0) {
        // MPI_Iprobe while no probe holds messages back (the common case): the real MPI's answer,
        // unless it is a message of an envelope's size (the loop below then reads it)
        const int rc = PMPI_Iprobe(src, tag, comm, flag, st);
        if (rc != MPI_SUCCESS || !*flag || status_bytes(st) != NM_ENV_WIRE || st->MPI_SOURCE == MPI_PROC_NULL) return rc;
    }
    for (unsigned spin = 0;; spin++) {
        Entry e;
        if (queue_find(comm, src, tag, msg != nullptr, &e)) {
            fill_status(st, e);
            if (msg) *msg = e.kind == Entry::HANDLE ? e.msg : fabricate(e);
            if (flag) *flag = 1;
            return MPI_SUCCESS;
        }
        int f = 0;
        MPI_Status ps;
        int rc = PMPI_Iprobe(src, tag, comm, &f, &ps);
        if (rc != MPI_SUCCESS) return rc;
        if (f) {
            if (status_bytes(&ps) != NM_ENV_WIRE || ps.MPI_SOURCE == MPI_PROC_NULL) {  // not an envelope
                if (msg) {
                    // the message found, unless another thread's receive or drain took it since
                    // (never a blocking MPI_Mprobe, which would then wait for good): look again
                    int got = 0;
                    if ((rc = PMPI_Improbe(ps.MPI_SOURCE, ps.MPI_TAG, comm, &got, msg, &ps)) != MPI_SUCCESS) return rc;
                    if (!got) continue;
                    if (ps.MPI_SOURCE != MPI_PROC_NULL && status_bytes(&ps) == NM_ENV_WIRE) {  // (a later one)
                        e = take(*msg, ps);
                        *msg = e.kind == Entry::HANDLE ? e.msg : fabricate(e);
                        fill_status(st, e);
                        if (flag) *flag = 1;
                        return MPI_SUCCESS;
                    }
                }
                if (flag) *flag = 1;
                // (a probe leaves the status's error field as it was, as the real MPI does:
                // MPI-4.1 3.2.5, only calls that complete several requests set it)
                const int err = st->MPI_ERROR;
                *st = ps;
                st->MPI_ERROR = err;
                return MPI_SUCCESS;
            }
            drain(comm, ps.MPI_SOURCE, ps.MPI_TAG);
            continue;  // in the queue now
        }
        if (!blocking) {
            if (flag) *flag = 0;
            if (msg) *msg = MPI_MESSAGE_NULL;
            return MPI_SUCCESS;
        }
        env_progress();
        if ((spin & 255) == 255) sched_yield();
    }
}

MPI_Comm env_self_comm() { return self_comm; }

int env_recv_bytes(MPI_Comm comm, int src, int tag, void *buf, size_t cap, MPI_Request *inner, MPI_Status *st, int *rc)
{
    Entry e;
    int icap = 0;
    {
        GateShared g;  // the look and the post, with no drain between
        if (!nm_int_fits(cap, &icap)) {  // (the caller refuses such a receive before: pers_recv_init_envelope)
            *rc = nm_error_code(MPI_ERR_COUNT, "ncclmpi: a receive of more than 2^31-1 packed bytes");
            return 0;
        }
        if (!queue_find(comm, src, tag, true, &e)) {
            *rc = PMPI_Irecv(buf, icap, MPI_PACKED, src, tag, comm, inner);
            return 0;
        }
    }
    *rc = deliver(e, buf, icap, MPI_PACKED, comm, st);
    return 1;
}

// The receives that post to the real MPI (Mrecv's message is matched already)
static bool posts_receive(const nm_op_t *o)
{
    return o->kind == NM_OPK_RECV || o->kind == NM_OPK_SENDRECV || o->kind == NM_OPK_SENDRECV_REPLACE;
}

bool env_receive_exempt(const nm_op_t *o, const DtypeInfo *rd)
{
    if ((o->flags & NM_OPF_PERS) || o->rcount < 0 || queued.load(std::memory_order_acquire) != 0) return false;
    if (!posts_receive(o)) return false;
    return rd && (uint64_t)o->rcount * rd->size < NM_ENV_WIRE;  // (null for an invalid type: the real MPI reports it)
}

// MPI_Sendrecv_replace: what it sends, packed aside before its receive lands in the same buffer
// (*pos: the packed bytes). false (packed empty) when the real MPI refuses the type.
static bool pack_replaced(const nm_op_t *o, std::vector<char> *packed, int *pos)
{
    int size = 0;
    *pos = 0;
    if (PMPI_Pack_size(o->scount, o->stype, o->comm, &size) != MPI_SUCCESS) return false;
    packed->resize((size_t)size + 1);
    if (PMPI_Pack(o->rbuf, o->scount, o->stype, packed->data(), size, pos, o->comm) == MPI_SUCCESS) return true;
    packed->clear();
    return false;
}

int env_recv_queued(nm_op_t *o, int *rc, Stage *s)
{
    Entry e;
    if (o->kind == NM_OPK_MRECV) {
        if (!o->msg || *o->msg == MPI_MESSAGE_NULL || *o->msg == MPI_MESSAGE_NO_PROC) return 0;
        {
            std::lock_guard<std::mutex> g(qmu);
            auto it = fabricated.find(*o->msg);
            if (it == fabricated.end()) return 0;
            e = it->second;
            fabricated.erase(it);
        }
        PMPI_Mrecv(nullptr, 0, MPI_BYTE, o->msg, MPI_STATUS_IGNORE);  // the stand-in
    } else {
        if (queued.load(std::memory_order_acquire) == 0 || !env_comm(o->comm)) return 0;
        if (!queue_find(o->comm, o->rpeer, o->rtag, true, &e)) return 0;  // (the gate stays: the post follows)
        env_gate_drop();  // the message is this receive's
    }
    const MPI_Comm comm = o->comm != MPI_COMM_NULL ? o->comm : MPI_COMM_WORLD;
    const bool nb = (o->flags & NM_OPF_NB) != 0;
    if (nb && e.kind == Entry::HANDLE) {  // the real MPI's own request
        *rc = PMPI_Imrecv(o->rbuf, o->rcount, o->rtype, &e.msg, o->req);
        if (s) *rc = real_done(o, *rc);  // the copy back waits for it
        return 1;
    }
    // the send of MPI_Sendrecv(_replace) goes first (nonblocking), from a copy for _replace
    MPI_Request sr = MPI_REQUEST_NULL;
    std::vector<char> packed;
    if (o->kind == NM_OPK_SENDRECV && o->peer != MPI_PROC_NULL)
        PMPI_Isend(o->sbuf, o->scount, o->stype, o->peer, o->tag, o->comm, &sr);
    if (o->kind == NM_OPK_SENDRECV_REPLACE && o->peer != MPI_PROC_NULL) {
        int pos = 0;
        pack_replaced(o, &packed, &pos);
        PMPI_Isend(packed.data(), pos, MPI_PACKED, o->peer, o->tag, o->comm, &sr);
    }
    MPI_Status st;
    int r = deliver(e, o->rbuf, o->rcount, o->rtype, comm, &st);
    if (sr != MPI_REQUEST_NULL) {
        int s2 = PMPI_Wait(&sr, MPI_STATUS_IGNORE);
        if (r == MPI_SUCCESS) r = s2;
    }
    if (nb) {  // a request that completes at once with this status
        Decode *d = decode_new(Decode{o->rbuf, o->rcount, o->rtype, comm, {}});
        d->has_preset = true;
        d->preset = st;
        d->preset_rc = r;
        if (s) {
            stage_set_decode(s, d);  // stays STAGED: the copy back reports it
        } else {
            o->stage = reinterpret_cast<struct nm_stage *>(d);
            o->flags |= NM_OPF_DECODE;
        }
        *rc = PMPI_Irecv(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, o->req);
        *rc = real_done(o, *rc);
        return 1;
    }
    if (s) {  // what fits went into the shadows: back to the device
        o->flags &= ~NM_OPF_STAGED;
        o->stage = nullptr;
        const nm_status_t fs = stage_finish(s, &st);
        stage_release(s);
        if (r == MPI_SUCCESS && fs != NM_OK && fs != NM_ERR_TRUNCATE) r = MPI_ERR_OTHER;
    }
    if (o->status && o->status != MPI_STATUS_IGNORE) *o->status = st;
    if (r != MPI_SUCCESS && o->comm != MPI_COMM_NULL) PMPI_Comm_call_errhandler(o->comm, r);
    *rc = r;
    return 1;
}

bool env_holds_messages() { return queued.load(std::memory_order_acquire) != 0; }

void env_comm_freed(MPI_Comm comm)
{
    if (queued.load(std::memory_order_acquire) == 0) return;
    std::vector<Entry> v;
    {
        std::lock_guard<std::mutex> g(qmu);
        auto it = queues.find(comm);
        if (it == queues.end()) return;
        v.swap(it->second);
        queues.erase(it);
        queued.fetch_sub((int)v.size(), std::memory_order_release);
    }
    for (Entry &e : v) {
        if (e.kind == Entry::HANDLE) {  // received into nothing kept (the real MPI's message is freed)
            std::vector<char> sink((size_t)std::max<MPI_Count>(e.count, 1));
            int n = 0;
            if (!nm_int_fits((unsigned long long)std::max<MPI_Count>(e.count, 0), &n)) n = INT_MAX;  // (truncated: the message is gone all the same)
            PMPI_Mrecv(sink.data(), n, MPI_BYTE, &e.msg, MPI_STATUS_IGNORE);
        } else if (e.kind == Entry::ENV) {
            release(e.env.wrank, e.env.id);
        }
    }
    if (!v.empty())
        NM_INFO(CALL, "MPI_Comm_free: %zu message(s) taken out of matching by a probe were never received; dropped", v.size());
}

void env_gate_hold_mt(const nm_op_t *o)
{
    // (receives that post to the real MPI: not Mrecv, whose message is matched, nor persistent
    // ones, whose starts hold it themselves, nor one from MPI_PROC_NULL, which matches no message:
    // the real MPI's own call, not env_gate_post's nonblocking form, keeps the blocking call's
    // checks; Open MPI 5's MPI_Recv reports ULFM's MPI_ERR_REVOKED on a revoked communicator
    // there, its MPI_Irecv and MPI_Wait do not)
    if (nm_env_gate || !posts_receive(o) || (o->flags & NM_OPF_PERS) || o->rpeer == MPI_PROC_NULL) return;
    gate.lock_shared();
    nm_env_gate = 1;
}

void env_gate_drop()
{
    if (!nm_env_gate) return;
    nm_env_gate = 0;
    gate.unlock_shared();
}

// Whether comm is revoked (ULFM): Open MPI 5.0.11 answers a blocking receive there with
// MPI_ERR_REVOKED at once, but never completes an MPI_Irecv posted after the revocation
bool comm_revoked(MPI_Comm comm)
{
#if NM_BUILD_HAVE_COMM_IS_REVOKED
    int flag = 0;
    return comm != MPI_COMM_NULL && PMPIX_Comm_is_revoked(comm, &flag) == MPI_SUCCESS && flag;
#else
    (void)comm;
    return false;
#endif
}

int env_gate_post(nm_op_t *o)
{
    const bool blocking = !(o->flags & NM_OPF_NB) && posts_receive(o);
    std::vector<char> packed;  // Sendrecv_replace: what it sends
    int pos = 0;
    const bool replace = blocking && o->kind == NM_OPK_SENDRECV_REPLACE && o->peer != MPI_PROC_NULL;
    // (on a revoked communicator the real MPI's blocking call fails at once: made as it is)
    if (!blocking || (replace && !pack_replaced(o, &packed, &pos)) || comm_revoked(o->comm)) {
        // a post already (or arguments the real MPI rejects before it matches anything)
        const int rc = real_post(o);
        env_gate_drop();
        return rc;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = PMPI_Irecv(o->rbuf, o->rcount, o->rtype, o->rpeer, o->rtag, o->comm, &r);
    env_gate_drop();
    if (rc != MPI_SUCCESS) return rc;
    // MPI_Sendrecv(_replace): the send, after the receive is posted (as the real MPI does it)
    if (o->kind != NM_OPK_RECV && o->peer != MPI_PROC_NULL) {
        rc = o->kind == NM_OPK_SENDRECV ? PMPI_Send(o->sbuf, o->scount, o->stype, o->peer, o->tag, o->comm)
                                        : PMPI_Send(packed.data(), pos, MPI_PACKED, o->peer, o->tag, o->comm);
        if (rc != MPI_SUCCESS) {
            PMPI_Cancel(&r);
            PMPI_Wait(&r, MPI_STATUS_IGNORE);
            return rc;
        }
    }
    return PMPI_Wait(&r, o->status);
}

}  // namespace ncclmpi

__thread int nm_env_gate = 0;

using namespace ncclmpi;

static int probe_hook(int src, int tag, MPI_Comm comm, int *flag, MPI_Message *msg, MPI_Status *st, bool blocking, int *rc)
{
    if (!env_on() || !env_comm(comm)) return 0;
    *rc = probe(src, tag, comm, flag, msg, st, blocking);
    return 1;
}

extern "C" int nm_probe_probe(int source, int tag, MPI_Comm comm, MPI_Status *status, int *rc)
{
    return probe_hook(source, tag, comm, nullptr, nullptr, status, true, rc);
}

extern "C" int nm_probe_iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status, int *rc)
{
    return probe_hook(source, tag, comm, flag, nullptr, status, false, rc);
}

extern "C" int nm_probe_mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status, int *rc)
{
    return probe_hook(source, tag, comm, nullptr, message, status, true, rc);
}

extern "C" int nm_probe_improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status,
                                int *rc)
{
    return probe_hook(source, tag, comm, flag, message, status, false, rc);
}
