// ncclmpi: sending point-to-point envelopes: payloads set aside, the send queue and its flush.
#include "core/tl/p2p/env_internal.h"

#include <unistd.h>

#include <cstring>

#include "core/comm/process_group.h"
#include "core/cuda/kernels.h"
#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/config.h"

namespace ncclmpi {

using namespace env;

static uint32_t next_id = 1;  // the next envelope's id (under mu)

static bool send_mode(int fn)
{
    return fn == NM_FN_Send || fn == NM_FN_Ssend || fn == NM_FN_Rsend || fn == NM_FN_Isend || fn == NM_FN_Issend ||
           fn == NM_FN_Irsend;  // buffered sends stay as they are (their buffer accounting is the user's)
}

// The envelope e through the real MPI, in the call's send mode; its payload waits in h.
static int send_wire(nm_op_t *o, const Held &h, const Envelope &e)
{
    memcpy(h.wire, &e, sizeof(e));
    int rc;
    switch (o->fn) {
    case NM_FN_Send: rc = PMPI_Send(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Ssend: rc = PMPI_Ssend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Rsend: rc = PMPI_Rsend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Isend: rc = PMPI_Isend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    case NM_FN_Issend: rc = PMPI_Issend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    default: rc = PMPI_Irsend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    }
    if (rc != MPI_SUCCESS) {  // never sent: nobody will release it (its copy ends before its block is free)
        if (h.slot >= 0) cu.cuEventSynchronize(pools[h.pool].slot_ev[h.slot]);
        std::lock_guard<std::mutex> g(mu);
        held.erase(e.id);
        count_inflight();
        held_free(h);
    }
    return rc;
}

// Whether a send of `bytes` contiguous bytes goes as an envelope (in either mode).
static bool send_eligible(const nm_op_t *o, size_t bytes)
{
    return nm_env_active && !(o->flags & NM_OPF_PERS) && o->peer != MPI_PROC_NULL && o->kind == NM_OPK_SEND && send_mode(o->fn) &&
           bytes >= env_limits().envelope_min && bytes > NM_ENV_WIRE && env_comm(o->comm);
}

// The envelope of a payload that waits in h (transport, addr: where), held until its release,
// sent in the call's mode.
static int send_held(nm_op_t *o, const Held &h, uint32_t transport, uint64_t addr, size_t bytes, const void *ipc)
{
    Envelope e{};
    e.nonce[0] = nonce[0];
    e.nonce[1] = nonce[1];
    e.bytes = bytes;
    e.addr = addr;
    e.pid = (int32_t)getpid();
    e.wrank = my_wrank;
    e.transport = transport;
    e.slot = h.slot;
    if (ipc) memcpy(e.ipc, ipc, sizeof(e.ipc));
    {
        std::lock_guard<std::mutex> g(mu);
        e.id = next_id++;
        held[e.id] = h;
        count_inflight();
        sent_count++;
    }
    return send_wire(o, h, e);
}

// Nonblocking sends (device payloads; host ones in the test mode) whose envelopes wait for the
// next flush, in call order (envelope.h).
struct Deferred {
    nm_op_t o;  // the call (o.req: set when it is sent)
    Task *t = nullptr;
    Held h{};
    Device *d = nullptr;  // null: a host payload (the test mode), or a staged send copied at its call
    CUevent ev = nullptr; // after the copy into the pool; null with src: copied at the flush
    int slot = -1;        // ev is this copy event of pool h.pool (its envelope need not wait for it);
                          // copied at the call: a reference held here, else the flush's batch's
    MPI_Request inner = MPI_REQUEST_NULL;
    const void *src = nullptr;  // the payload, copied by the flush's copy kernel to dst (bytes)
    void *dst = nullptr;
    size_t bytes = 0;
    CUevent ord = nullptr;      // with src: the legacy stream's work at the call, which the copy follows
    // a staged send (env_send_staged): the real MPI's send of o from the host shadows of `stage`
    // (the task's), copied at the flush (src) or at its call (d null: stage_in_wait waits for
    // it); the caller's derived type, duplicated
    Stage *stage = nullptr;
    MPI_Datatype tdup = MPI_DATATYPE_NULL;
};
static std::mutex defer_mu;        // the list
static std::mutex defer_flush_mu;  // one flush at a time: a thread's envelopes leave in its order
static std::vector<Deferred> deferred;
static std::atomic<int> ndeferred{0};  // its size, read without a lock (a send that goes as it is asks)

bool env_send_defers(const nm_op_t *o)
{
    const nm_defer_in_t in = {nm_env_active, engine_may_hold(), o->kind, o->flags, send_mode(o->fn),
                              nm_cfg.P2P_SEND_QUEUE || engine_group_depth() > 0};
    return nm_env_send_defers(&in) != 0;
}

// A nonblocking send into the queue (x: an envelope, its payload set aside in x.h, or a staged
// send); its request is a task. x.src: a payload the flush copies (x.ev null); the legacy stream's
// point is recorded here, under the list's lock, so that the list's last entry of a device has
// the latest point of all.
static int defer(nm_op_t *o, Deferred x, int *rc)
{
    x.o = *o;
    x.t = Task::get(o);
    if (x.stage) x.t->set_inner(MPI_REQUEST_NULL, x.stage);  // (released with the task)
    x.t->set_deferred();
    x.ord = x.src ? ev_get(x.d) : nullptr;
    if ((*rc = x.t->publish(o->req)) != MPI_SUCCESS) {  // (no memory for a request: nothing is sent)
        if (x.ev || x.ord) {
            DeviceGuard dg(x.d->ctx);
            if (x.ev) cu.cuEventSynchronize(x.ev);
            mark_put(x.d, CopyMark{x.ev ? x.ev : x.ord, x.slot});
        }
        held_free(x.h);
        if (x.tdup != MPI_DATATYPE_NULL) PMPI_Type_free(&x.tdup);
        if (x.stage) {
            x.t->set_inner(MPI_REQUEST_NULL, nullptr);
            stage_release(x.stage);
        }
        return 1;
    }
    __atomic_add_fetch(&nm_hot.queued, 1, __ATOMIC_RELAXED);  // (before a flush can take it)
    std::lock_guard<std::mutex> g(defer_mu);
    if (x.ord) {
        DeviceGuard dg(x.d->ctx);
        if (cu.cuEventRecord(x.ord, CU_STREAM_LEGACY) != CUDA_SUCCESS) {
            ev_put(x.d, x.ord);
            x.ord = nullptr;  // (its batch then runs on the legacy stream)
        }
    }
    deferred.push_back(x);
    ndeferred.store((int)deferred.size(), std::memory_order_release);
    return 1;
}

// Staged sends of a burst that copy to their host shadows at their calls: the flush waits for the
// copies before the real MPI's sends, and these have begun by then (2xH200: with one, a
// two-neighbour ring took 0.1x raw NCCL's time more than without batches).
enum { STAGED_AT_CALL = 2 };

// Whether a queued send's payload (n bytes, src to dst) is copied at the flush, by the copy kernel
// with the others', rather than at its call: every envelope's that the kernel can take (the
// envelope leaves at the flush without waiting for the copy, which the receiver's pull waits for
// on the GPU: copies at the calls only cost the calls their time, 1xH200: a ring and a halo
// 0.66-0.97x the time of the first two copied at their calls), a staged send's but the first
// STAGED_AT_CALL of a burst.
static bool copied_at_flush(const void *dst, const void *src, size_t n, bool staged)
{
    return (!staged || ndeferred.load(std::memory_order_relaxed) >= STAGED_AT_CALL) &&
           copyv_batchable(dst, src, n, env_limits().copy_batch);
}

// The payloads of v's batched sends into their pool blocks: per device, copy-kernel launches on
// the flushing thread's copy stream after the legacy stream's point at the last of these sends'
// calls (so after the application's work queued before each call, but not after what it queued
// since: a kernel launched between an MPI_Isend and the MPI_Waitall overlaps the exchange; it
// cannot write a send buffer before the send completes), then one event, which each batched
// entry gets as its ev (copy_regions: without the kernel, driver copies): a copy event of the
// device's pool when one is free (the batch's envelopes then go without waiting for it). An entry
// whose copies could not be issued keeps a null ev. Returns the batches, whose events (or slot
// references) go back at the end of the flush.
struct Batch {
    Device *d;
    CopyMark m;  // its event (a copy event's reference held here)
};
static std::vector<Batch> copy_batched(std::vector<Deferred> &v)
{
    std::vector<Batch> out;
    for (size_t i = 0; i < v.size(); i++) {
        if (!v[i].src || v[i].ev) continue;
        Device *d = v[i].d;  // this device's batch: every entry from i on with it
        DeviceGuard dg(d->ctx);
        CUevent last = nullptr;  // the latest point (the list is in the order the points were recorded)
        bool all_ord = true;
        std::vector<nm_copyv_region_t> r;
        for (size_t j = i; j < v.size(); j++)
            if (v[j].src && v[j].d == d) {
                last = v[j].ord;
                all_ord = all_ord && v[j].ord;
                r.push_back({(char *)v[j].dst, (const char *)v[j].src, v[j].bytes});
            }
        Lane *l = lane_get(d);
        CUstream s = CU_STREAM_LEGACY;  // (no point recorded: after everything, as a last resort)
        if (l && all_ord && cu.cuStreamWaitEvent(l->stream, last, 0) == CUDA_SUCCESS) s = l->stream;
        const bool ok = copy_regions(d->ctx, r.data(), r.size(), s) == CUDA_SUCCESS;
        CopyMark m = ok ? mark_get(d, true) : CopyMark();
        if (m.ev && cu.cuEventRecord(m.ev, s) != CUDA_SUCCESS) {
            mark_put(d, m);
            m = CopyMark();
        }
        if (!m.ev) cu.cuStreamSynchronize(s);  // (what was issued ends before the blocks are freed)
        else out.push_back({d, m});
        for (size_t j = i; j < v.size(); j++)
            if (v[j].src && v[j].d == d && !v[j].ev) {
                v[j].ev = m.ev;
                v[j].slot = m.slot;
            }
        if (!m.ev)
            for (size_t j = i; j < v.size(); j++)
                if (v[j].d == d) v[j].src = nullptr;  // (failed: marked by a null ev, nothing to put back)
    }
    return out;
}

void env_flush_sends()
{
    if (ndeferred.load(std::memory_order_acquire) == 0) return;  // the common case: no lock
    std::lock_guard<std::mutex> fg(defer_flush_mu);
    std::vector<Deferred> v;
    {
        std::lock_guard<std::mutex> g(defer_mu);
        v.swap(deferred);
        ndeferred.store(0, std::memory_order_release);
    }
    if (v.empty()) return;
    // the copies in of staged sends copied at their calls, waited for together (one wait per
    // copy stream)
    std::vector<Stage *> stages;
    for (const Deferred &x : v)
        if (x.stage && !x.d) stages.push_back(x.stage);
    std::vector<nm_status_t> staged_st(stages.size());
    stage_in_wait(stages.data(), stages.size(), staged_st.data());
    size_t nstaged = 0;
    // the envelopes of sends copied at their calls go before the batches are issued, those of the
    // batched ones after (in call order all the same)
    std::vector<Batch> batches;
    bool issued = false;
    CUevent waited = nullptr;  // a batch's event, waited for once
    for (Deferred &x : v) {  // (the copies at the calls ran in call order on the legacy stream, a
        CUresult r = CUDA_SUCCESS;  // batch after them: the first wait is the only long one)
        if (x.src && !issued) {
            batches = copy_batched(v);
            issued = true;
        }
        if (x.stage && !x.d) {
            r = staged_st[nstaged++] == NM_OK ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
        } else if (x.d && !x.ev) {
            r = CUDA_ERROR_UNKNOWN;  // (its batch could not be issued)
        } else if (x.d && (x.slot < 0 || x.stage) && x.ev != waited) {  // (an envelope behind a copy event
            DeviceGuard dg(x.d->ctx);                                      // goes at once: its pull waits)
            r = cu.cuEventSynchronize(x.ev);
            if (x.src) waited = x.ev;
            else ev_put(x.d, x.ev);  // (a batch's event goes back below)
        }
        if (x.stage) {  // the real MPI's send from the shadow
            int rc = MPI_SUCCESS;
            if (r == CUDA_SUCCESS) {
                x.o.req = &x.inner;
                if (x.tdup != MPI_DATATYPE_NULL) x.o.stype = x.tdup;
                rc = nm_real_fns[x.o.fn](&x.o);
            }
            if (x.tdup != MPI_DATATYPE_NULL) PMPI_Type_free(&x.tdup);  // (the real MPI keeps what it needs)
            x.t->sent(x.inner, r != CUDA_SUCCESS ? NM_ERR_CUDA : rc == MPI_SUCCESS ? NM_OK : NM_ERR_MPI,
                      r != CUDA_SUCCESS ? "the copy of the message to the host failed" : "the real MPI did not take the send");
        } else if (r != CUDA_SUCCESS) {
            held_free(x.h);
            x.t->sent(MPI_REQUEST_NULL, NM_ERR_CUDA, "the copy of the payload into the send pool failed");
        } else {
            x.o.req = &x.inner;
            if (x.d && x.slot >= 0) {  // one reference for the envelope (until its release), one for the request
                x.h.slot = x.slot;
                slot_ref(x.h.pool, x.slot, 2);
            }
            const int rc = x.d ? send_held(&x.o, x.h, NM_ENV_IPC, (uint64_t)x.h.off, x.h.len, &pools[x.h.pool].handle)
                               : send_held(&x.o, x.h, NM_ENV_HOST, (uint64_t)(uintptr_t)x.h.payload, x.h.len, nullptr);
            if (x.h.slot >= 0) {  // the request completes once the copy is done too (its buffer is the caller's again)
                if (rc == MPI_SUCCESS) x.t->set_copy(x.h.pool, x.h.slot);
                else slot_unref(x.h.pool, x.h.slot);
            }
            x.t->sent(x.inner, rc == MPI_SUCCESS ? NM_OK : NM_ERR_MPI, "the real MPI did not take the envelope");
        }
        __atomic_sub_fetch(&nm_hot.queued, 1, __ATOMIC_RELAXED);
    }
    for (const Batch &b : batches) mark_put(b.d, b.m);
    for (const Deferred &x : v) {
        if (x.ord) ev_put(x.d, x.ord);
        if (!x.src && x.slot >= 0) slot_unref(x.h.pool, x.slot);  // (a copy at its call)
    }
}

// A nonblocking send whose payload's copy into the pool (copy event `slot` of the pool, holding
// the reference mark_get gave) was issued at its call: its envelope goes now, and its request
// is a task that completes once the envelope's send and the copy have (the buffer is the
// caller's again then). The call does not wait for the copy, which follows the application's
// work on the legacy stream: that work may wait for the host (MPI-3.1 3.7.2: MPI_Isend returns
// at once, MPI_Test reports the send incomplete meanwhile).
static int send_copying(nm_op_t *o, Held h, Device *d, int slot, int *rc)
{
    Task *t = Task::get(o);
    t->set_deferred();  // (not complete before sent() gives it its request)
    if ((*rc = t->publish(o->req)) != MPI_SUCCESS) {  // (no memory for a request: nothing is sent)
        DeviceGuard dg(d->ctx);
        cu.cuEventSynchronize(pools[h.pool].slot_ev[slot]);  // (the copy reads the caller's buffer)
        slot_unref(h.pool, slot);
        held_free(h);
        return 1;
    }
    nm_op_t so = *o;
    MPI_Request inner = MPI_REQUEST_NULL;
    so.req = &inner;
    h.slot = slot;
    slot_ref(h.pool, slot, 1);  // the envelope's (until its release); mark_get's is the request's
    const int src = send_held(&so, h, NM_ENV_IPC, (uint64_t)h.off, h.len, &pools[h.pool].handle);
    if (src == MPI_SUCCESS) t->set_copy(h.pool, slot);
    else slot_unref(h.pool, slot);
    t->sent(inner, src == MPI_SUCCESS ? NM_OK : NM_ERR_MPI, "the real MPI did not take the envelope");
    return 1;
}

int env_send_device(nm_op_t *o, const void *src, size_t bytes, int dev, int *rc)
{
    if (!device_mode || dev < 0 || dev >= 64 || !send_eligible(o, bytes)) return 0;
    env_progress();  // blocks released since
    const long off = pool_alloc(dev, bytes);
    // (a send that is staged after all sends what is queued first: the non-overtaking order)
    if (off < 0) return env_flush_sends(), 0;
    Device *d = device_get(dev);
    Held h{nullptr, (char *)calloc(1, NM_ENV_WIRE + 3), dev, (size_t)off, bytes};
    const bool later = env_send_defers(o);
    if (later && d && h.wire && copied_at_flush((const void *)(uintptr_t)(pools[dev].base + h.off), src, bytes, false)) {
        Deferred x;
        x.h = h;
        x.d = d;
        x.src = src;
        x.dst = (void *)(uintptr_t)(pools[dev].base + h.off);
        x.bytes = bytes;
        return defer(o, x, rc);
    }
    // the copy's event: a copy event of the pool when one is free (the envelope need not wait for
    // it), else a plain one (a nonblocking send's flush waits for it; a blocking send, at once)
    const CopyMark m = d && h.wire ? mark_get(d, later) : CopyMark();
    const int slot = m.slot;
    CUevent ev = m.ev;
    bool ok = d && h.wire && (ev || !later);
    if (ok) {  // after the application's work on the legacy stream, which it synchronises with
        DeviceGuard dg(d->ctx);
        ok = cu.cuMemcpyAsync(pools[dev].base + (size_t)off, (CUdeviceptr)(uintptr_t)src, bytes, CU_STREAM_LEGACY) == CUDA_SUCCESS &&
             (ev ? cu.cuEventRecord(ev, CU_STREAM_LEGACY) : cu.cuStreamSynchronize(CU_STREAM_LEGACY)) == CUDA_SUCCESS;
    }
    if (!ok) {
        if (ev) {
            DeviceGuard dg(d->ctx);
            cu.cuStreamSynchronize(CU_STREAM_LEGACY);  // (the copy may have started)
            mark_put(d, m);
        }
        held_free(h);
        if (later) env_flush_sends();
        return 0;
    }
    if (!later && slot >= 0 && (o->flags & NM_OPF_NB)) return send_copying(o, h, d, slot, rc);
    if (!later) {  // the envelope goes while the copy runs; the call returns once the buffer is free
        if (slot >= 0) {
            h.slot = slot;
            slot_ref(dev, slot, 1);  // the envelope's
        }
        *rc = send_held(o, h, NM_ENV_IPC, (uint64_t)off, bytes, &pools[dev].handle);
        if (slot >= 0) {
            DeviceGuard dg(d->ctx);
            if (cu.cuEventSynchronize(ev) != CUDA_SUCCESS && *rc == MPI_SUCCESS)
                *rc = nm_raise_error(o->fn, NM_ERR_CUDA, "the copy of the payload into the send pool failed", o->comm);
            slot_unref(dev, slot);
        }
        return 1;
    }
    Deferred x;
    x.h = h;
    x.d = d;
    x.ev = ev;
    x.slot = slot;
    return defer(o, x, rc);
}

int env_send_staged(nm_op_t *o, Stage *s, int *rc)
{
    Deferred x;
    x.stage = s;
    // the real MPI gets the call at the flush: a derived type, which the caller may free at once,
    // goes as a duplicate
    int ni = 0, na = 0, nd = 0, comb = MPI_COMBINER_NAMED;
    PMPI_Type_get_envelope(o->stype, &ni, &na, &nd, &comb);
    if (comb != MPI_COMBINER_NAMED && PMPI_Type_dup(o->stype, &x.tdup) != MPI_SUCCESS) return 0;
    // (the kernel writes only shadows mapped for the device: stage_copy_target)
    if (!(stage_copy_target(s, &x.src, &x.dst, &x.bytes, &x.d) && copied_at_flush(x.dst, x.src, x.bytes, true))) {
        x.src = x.dst = nullptr;
        x.d = nullptr;
        if (stage_copy_in(s, true) != NM_OK) {
            if (x.tdup != MPI_DATATYPE_NULL) PMPI_Type_free(&x.tdup);
            return 0;
        }
    }
    return defer(o, x, rc);
}

int env_send(nm_op_t *o, int *rc)
{
    if (device_mode) return 0;
    const DtypeInfo *d = dtype_info(o->stype);
    if (!d || !d->contig || o->scount < 0) return 0;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(d, 0, o->scount, &lo, &hi);
    const size_t bytes = hi > lo ? (size_t)(hi - lo) : 0;
    if (!send_eligible(o, bytes)) return 0;
    env_progress();  // free what was released
    Held h{(char *)malloc(bytes), (char *)calloc(1, NM_ENV_WIRE + 3)};
    if (!h.payload || !h.wire) {
        held_free(h);
        return 0;  // the real MPI sends it as it is
    }
    memcpy(h.payload, (const char *)o->sbuf + lo, bytes);
    h.len = bytes;
    if (env_send_defers(o)) {  // as device mode does
        Deferred x;
        x.h = h;
        return defer(o, x, rc);
    }
    *rc = send_held(o, h, NM_ENV_HOST, (uint64_t)(uintptr_t)h.payload, bytes, nullptr);
    return 1;
}

}  // namespace ncclmpi
