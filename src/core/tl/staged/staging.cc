// ncclmpi: staging through pinned host memory.
#include "core/tl/staged/staging.h"

#include "core/tl/p2p/envelope.h"

#include <hwloc.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"
#include "core/comm/process_group.h"
#include "core/cuda/kernels.h"
#include "core/cuda/memkind.h"
#include "core/op_table.h"
#include "core/comm/comm_state.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

const char stage_wait_reason[] = "in the real MPI, its device buffers staged through host memory";

static std::mutex dev_mu;
static std::map<int, Device *> devices;

static hwloc_topology_t topo;
static bool topo_ready, topo_failed;

static int numa_of(int ordinal)
{
    if (topo_failed) return -1;
    if (!topo_ready) {
        if (hwloc_topology_init(&topo) != 0) { topo_failed = true; return -1; }
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(topo) != 0) { hwloc_topology_destroy(topo); topo_failed = true; return -1; }
        topo_ready = true;
    }
    CUdevice d;
    char bus[32];
    if (cu.cuDeviceGet(&d, ordinal) != CUDA_SUCCESS || cu.cuDeviceGetPCIBusId(bus, sizeof(bus), d) != CUDA_SUCCESS)
        return -1;
    hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus);
    hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : nullptr;
    if (!anc || !anc->nodeset) return -1;
    int node = hwloc_bitmap_first(anc->nodeset);
    return hwloc_bitmap_weight(anc->nodeset) == 1 ? node : -1;
}

Device *device_get(int ordinal)
{
    std::lock_guard<std::mutex> g(dev_mu);
    auto it = devices.find(ordinal);
    if (it != devices.end()) return it->second;
    Device *d = new Device;
    d->ordinal = ordinal;
    CUdevice cud;
    NM_CU_CHECK(cu.cuDeviceGet(&cud, ordinal), delete d; return nullptr);
    NM_CU_CHECK(cu.cuDevicePrimaryCtxRetain(&d->ctx, cud), delete d; return nullptr);
    d->numa = numa_of(ordinal);
    NM_INFO(STAGE, "device %d: staging through NUMA node %d", ordinal, d->numa);
    devices[ordinal] = d;
    return d;
}

static thread_local std::map<int, Lane *> lanes;  // the calling thread's, by device ordinal

Lane *lane_get(Device *d)
{
    // per thread, never freed: a staged call keeps the lane it was issued on (Stage::lane) and
    // copies back on that lane's stream even when another thread completes it (CUDA streams take
    // work from any thread)
    auto it = lanes.find(d->ordinal);
    if (it != lanes.end()) return it->second;
    Lane *l = new Lane;
    l->dev = d;
    DeviceGuard dg(d->ctx);
    NM_CU_CHECK(cu.cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING), delete l; return nullptr);
    NM_CU_CHECK(cu.cuStreamCreate(&l->stream2, CU_STREAM_NON_BLOCKING), delete l; return nullptr);
    NM_CU_CHECK(cu.cuEventCreate(&l->order_ev, CU_EVENT_DISABLE_TIMING), delete l; return nullptr);
    for (int i = 0; i < 2; i++) {
        NM_CU_CHECK(cu.cuEventCreate(&l->in_ev[i], CU_EVENT_DISABLE_TIMING), delete l; return nullptr);
        NM_CU_CHECK(cu.cuEventCreate(&l->out_ev[i], CU_EVENT_DISABLE_TIMING), delete l; return nullptr);
    }
    lanes[d->ordinal] = l;
    return l;
}

nm_status_t order_after_app(Lane *l, CUstream s)
{
    if (!nm_cfg.STREAM_ORDER) return NM_OK;
    NM_CU_CHECK(cu.cuEventRecord(l->order_ev, CU_STREAM_LEGACY), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuStreamWaitEvent(s, l->order_ev, 0), return NM_ERR_CUDA);
    return NM_OK;
}

// ---------------------------------------------------------------------------------------------
// Pinned pool: power-of-two classes from 64 KiB, cached up to NCCLMPI_STAGE_POOL bytes.
// ---------------------------------------------------------------------------------------------
static std::mutex pool_mu;
static std::multimap<size_t, void *> pool_free;  // class size -> buffer
static size_t pool_cached;
enum Origin { BY_CUDA, BY_HWLOC, BY_HEAP };
struct Pinned {
    Origin how;
    int mapped_dev;  // the device whose kernels may write it at its own address, or -1
};
static std::map<void *, Pinned> pool_origin;  // how each buffer was allocated

static size_t size_class(size_t n)
{
    size_t c = 64 << 10;
    while (c < n) c <<= 1;
    return c;
}

void *pinned_get(size_t bytes, Device *dev, size_t *got, bool *mapped)
{
    size_t cls = size_class(bytes);
    *got = cls;
    if (mapped) *mapped = false;
    {
        std::lock_guard<std::mutex> g(pool_mu);
        auto it = pool_free.find(cls);
        if (it != pool_free.end()) {
            void *p = it->second;
            pool_free.erase(it);
            pool_cached -= cls;
            if (mapped) *mapped = dev && pool_origin[p].mapped_dev == dev->ordinal;
            return p;
        }
    }
    void *p = nullptr;
    Origin how = BY_CUDA;
    DeviceGuard dg(dev ? dev->ctx : nullptr);  // pinned memory belongs to a context: make one current
    if (dev && dev->numa >= 0 && topo_ready) {
        hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)dev->numa);
        if (node) p = hwloc_alloc_membind(topo, cls, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
        if (p && cu.cuMemHostRegister(p, cls, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS) {
            hwloc_free(topo, p, cls);
            p = nullptr;
        }
        if (p) how = BY_HWLOC;
    }
    if (!p && cu.cuMemAllocHost(&p, cls) != CUDA_SUCCESS) p = nullptr;
    if (!p) {
        // No pinned memory left: pageable memory still works (copies are slower and synchronous),
        // and a rank that ran out must still make the same real MPI calls as the others.
        p = malloc(cls);
        if (!p) return nullptr;
        how = BY_HEAP;
        static bool said;
        if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
            NM_WARN(STAGE, "pinned host memory exhausted: staging through pageable memory (slower)");
    }
    // mapped at its own address (unified addressing): a kernel of this device may write it
    CUdeviceptr dp = 0;
    const bool at_own = dev && how != BY_HEAP && cu.cuMemHostGetDevicePointer(&dp, p, 0) == CUDA_SUCCESS &&
                        dp == (CUdeviceptr)(uintptr_t)p;
    std::lock_guard<std::mutex> g(pool_mu);
    pool_origin[p] = Pinned{how, at_own ? dev->ordinal : -1};
    if (mapped) *mapped = at_own;
    return p;
}

static void pinned_free(void *p, size_t cls)
{
    Origin how = pool_origin[p].how;
    pool_origin.erase(p);
    if (how == BY_HWLOC) {
        cu.cuMemHostUnregister(p);
        hwloc_free(topo, p, cls);
    } else if (how == BY_HEAP) {
        free(p);
    } else {
        cu.cuMemFreeHost(p);
    }
}

void pinned_put(void *p, size_t cls)
{
    std::lock_guard<std::mutex> g(pool_mu);
    if (pool_cached + cls > nm_cfg.STAGE_POOL) {
        pinned_free(p, cls);
        return;
    }
    pool_free.emplace(cls, p);
    pool_cached += cls;
}

void pinned_trim()
{
    std::lock_guard<std::mutex> g(pool_mu);
    for (auto &kv : pool_free) pinned_free(kv.second, kv.first);
    pool_free.clear();
    pool_cached = 0;
}

// ---------------------------------------------------------------------------------------------
// Stage in / out
// ---------------------------------------------------------------------------------------------
struct Region {
    char *dev;    // device address of the span start
    char *host;   // shadow of the span start
    size_t len;
    size_t cls;   // pool class of `host`
    int dir;
    bool counted; // only the bytes the status counts go back (a receive, a read into a contiguous buffer)
    bool received;  // a point-to-point receive (which may have got an envelope)
    bool mapped;  // `host` is mapped at its own address for the stage's device: its kernels may copy
};

struct Stage {
    Device *dev = nullptr;
    Lane *lane = nullptr;  // whose stream orders the copies (the calling thread's)
    Region r[2];
    int n = 0;
    MPI_Status status;  // the receive's, where the caller passed MPI_STATUS_IGNORE
    // a point-to-point receive into a non-contiguous buffer, with envelopes on: the shadow as the
    // receive saw it, to decode an envelope through its datatype (a duplicate: the caller may free
    // its own before the receive completes)
    Decode *decode = nullptr;
    MPI_Datatype rtype_dup = MPI_DATATYPE_NULL;
    // a copy back under way (stage_finish_begin): recorded after it; its result; the envelope
    // payloads whose memory goes back to their senders once it is done
    CUevent done_ev = nullptr;
    CUevent in_ev = nullptr;     // after the copy in, when its wait is left to stage_in_wait
    PullBatch *batch = nullptr;  // or: the batch its pulls are in (its event stands for done_ev)
    nm_status_t fin = NM_OK;
    EnvRelease rel[2];
};

// Pulls queued on one lane during one progress sweep, launched together (stage_pull_async).
// Made and launched by the lane's thread; once launched, any thread may poll it (refs: the
// stages waiting for it).
struct PullBatch {
    Lane *lane = nullptr;
    std::vector<nm_copyv_region_t> r;
    CUevent ev = nullptr;
    bool issued = false;
    std::atomic<bool> done{false};
    std::atomic<int> st{NM_OK};
    std::atomic<int> refs{0};
    std::atomic<uint64_t> notready_sweep{0};  // the progress sweep that last found it not done
};

// Events that mark the end of a copy, per device (a copy may end on another thread)
static std::mutex ev_mu;
static std::map<int, std::vector<CUevent>> ev_free;

CUevent ev_get(Device *d)
{
    {
        std::lock_guard<std::mutex> g(ev_mu);
        auto &v = ev_free[d->ordinal];
        if (!v.empty()) {
            CUevent e = v.back();
            v.pop_back();
            return e;
        }
    }
    CUevent e = nullptr;
    if (cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
    return e;
}

void ev_put(Device *d, CUevent e)
{
    std::lock_guard<std::mutex> g(ev_mu);
    ev_free[d->ordinal].push_back(e);
}

nm_status_t stage_copy_in(Stage *s, bool later)
{
    if (!s->dev) return NM_OK;
    DeviceGuard g(s->dev->ctx);
    Lane *l = lane_get(s->dev);
    nm_status_t st = l ? order_after_app(l, l->stream) : NM_ERR_CUDA;
    bool copied = false;
    for (int i = 0; i < s->n && st == NM_OK; i++)
        if (s->r[i].dir & BUF_IN) {
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)s->r[i].host, (CUdeviceptr)s->r[i].dev, s->r[i].len, l->stream),
                        st = NM_ERR_CUDA);
            copied = true;
        }
    // the real MPI reads what was copied: wait for it. A call that only receives copies nothing
    // now: the copy back goes on this lane's stream (s->lane, whichever thread completes the
    // call), behind its wait on the application's work, so the call does not wait for the GPU
    if (st == NM_OK && copied && later && (s->in_ev = ev_get(s->dev)) &&
        cu.cuEventRecord(s->in_ev, l->stream) != CUDA_SUCCESS) {
        ev_put(s->dev, s->in_ev);
        s->in_ev = nullptr;
    }
    if (st == NM_OK && copied && !s->in_ev) NM_CU_CHECK(cu.cuStreamSynchronize(l->stream), st = NM_ERR_CUDA);
    s->lane = l;
    return st;
}

nm_status_t stage_copy_range(Stage *s, size_t off, size_t len, bool to_device)
{
    if (!s->dev || s->n < 1 || off >= s->r[0].len) return NM_OK;
    len = std::min(len, s->r[0].len - off);
    if (!len) return NM_OK;
    DeviceGuard g(s->dev->ctx);
    Lane *l = lane_get(s->dev);
    if (!l) return NM_ERR_CUDA;
    nm_status_t st = to_device ? NM_OK : order_after_app(l, l->stream);
    const Region &r = s->r[0];
    const CUdeviceptr dev = (CUdeviceptr)(r.dev + off), host = (CUdeviceptr)(r.host + off);
    if (st == NM_OK)
        NM_CU_CHECK(cu.cuMemcpyAsync(to_device ? dev : host, to_device ? host : dev, len, l->stream), st = NM_ERR_CUDA);
    if (st == NM_OK) NM_CU_CHECK(cu.cuStreamSynchronize(l->stream), st = NM_ERR_CUDA);
    return st;
}

bool stage_copy_target(const Stage *s, const void **src, void **dst, size_t *n, Device **dev)
{
    if (!s->dev || s->n != 1 || s->r[0].dir != BUF_IN || !s->r[0].mapped) return false;
    *src = s->r[0].dev;
    *dst = s->r[0].host;
    *n = s->r[0].len;
    *dev = s->dev;
    return true;
}

void stage_in_wait(Stage *const *v, size_t n, nm_status_t *st)
{
    std::vector<std::pair<Lane *, nm_status_t>> waited;  // (a burst's few streams)
    for (size_t i = n; i-- > 0;) {
        Stage *s = v[i];
        st[i] = NM_OK;
        if (!s->in_ev) continue;
        auto w = std::find_if(waited.begin(), waited.end(), [s](const auto &x) { return x.first == s->lane; });
        if (w == waited.end()) {
            DeviceGuard g(s->dev->ctx);
            waited.emplace_back(s->lane, cu.cuEventSynchronize(s->in_ev) == CUDA_SUCCESS ? NM_OK : NM_ERR_CUDA);
            w = waited.end() - 1;
        }
        st[i] = w->second;
        ev_put(s->dev, s->in_ev);
        s->in_ev = nullptr;
    }
}

bool stage_has_out(const Stage *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->r[i].dir & BUF_OUT) return true;
    return false;
}

nm_status_t stage_in(nm_op_t *o, const BufRef *b, int nb, Stage **out, bool copy_in)
{
    Stage *s = new Stage;
    for (int i = 0; i < nb; i++) {
        if (b[i].kind == NM_MEM_HOST || b[i].kind == NM_MEM_PINNED || b[i].hi <= b[i].lo) continue;
        if (!s->dev) s->dev = device_get(b[i].device);
        if (!s->dev) { stage_release(s); return NM_ERR_CUDA; }
        Region &r = s->r[s->n];
        r.dev = (char *)b[i].ptr + b[i].lo;
        r.len = (size_t)(b[i].hi - b[i].lo);
        r.dir = b[i].dir;
        // a message may be shorter than the receive buffer, whose rest MPI leaves alone: a dense
        // one gets back the received bytes only (a sparse one is copied in first, below)
        r.received = (nm_opk(o->kind) & NM_KF_P2P) && b[i].is_recv && b[i].dir == BUF_OUT && b[i].dense;
        r.counted = r.received || (b[i].counted && b[i].dir == BUF_OUT && b[i].dense);
        if (r.counted && o->status == MPI_STATUS_IGNORE) o->status = &s->status;
        r.host = (char *)pinned_get(r.len, s->dev, &r.cls, &r.mapped);
        if (!r.host) {
            NM_ERROR(STAGE, "cannot allocate %zu bytes of pinned host memory", r.len);
            stage_release(s);
            return NM_ERR_NO_MEM;
        }
        s->n++;
        char *shadow = r.host - b[i].lo;  // where the caller's pointer maps
        // (MPI_Sendrecv_replace's buffer too: what it receives may be an envelope)
        if (b[i].is_recv && !r.counted && (nm_opk(o->kind) & NM_KF_P2P) && env_on() && !s->decode) {
            if (o->status == MPI_STATUS_IGNORE) o->status = &s->status;
            PMPI_Type_dup(o->rtype, &s->rtype_dup);
            s->decode = decode_new(Decode{shadow, o->rcount, s->rtype_dup, o->comm != MPI_COMM_NULL ? o->comm : MPI_COMM_WORLD, {}});
        }
        if (b[i].is_recv) o->rbuf = shadow;
        else o->sbuf = shadow;
        if (o->kind == NM_OPK_BCAST || o->kind == NM_OPK_SENDRECV_REPLACE) o->sbuf = o->rbuf;
        if (b[i].dir == BUF_OUT && !b[i].dense) r.dir = BUF_INOUT;  // keep the gaps' contents
    }
    // a persistent call copies at each MPI_Start (stage_copy_in), not when it is made
    if (copy_in && !(o->flags & NM_OPF_PERS)) {
        nm_status_t st = stage_copy_in(s);
        if (st != NM_OK) { stage_release(s); return st; }
    }
    o->flags |= NM_OPF_STAGED;
    o->stage = reinterpret_cast<struct nm_stage *>(s);
    *out = s;
    return NM_OK;
}

void stage_set_decode(Stage *s, Decode *d)
{
    decode_free(s->decode);
    s->decode = d;
}

bool stage_pull_async(void *dst, CUdeviceptr src, size_t n, CUstream stream)
{
    Lane *l = nullptr;
    for (auto &x : lanes)
        if (x.second->stream == stream) l = x.second;
    if (!l || !copyv_batchable(dst, (const void *)(uintptr_t)src, n, env_limits().copy_batch))
        return cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, n, stream) == CUDA_SUCCESS;
    if (!l->open) {
        l->open = new PullBatch;
        l->open->lane = l;
    }
    l->open->r.push_back({(char *)dst, (const char *)(uintptr_t)src, n});
    return true;
}

// Launch b's copies on its lane's stream (the lane's thread, in its context), then its event.
static void pulls_launch(PullBatch *b)
{
    Lane *l = b->lane;
    bool ok = copy_regions(l->dev->ctx, b->r.data(), b->r.size(), l->stream) == CUDA_SUCCESS;
    b->issued = true;
    if (l->open == b) l->open = nullptr;
    if (ok && (b->ev = ev_get(l->dev)) && cu.cuEventRecord(b->ev, l->stream) == CUDA_SUCCESS) return;
    if (b->ev) ev_put(l->dev, b->ev);
    b->ev = nullptr;
    if (cu.cuStreamSynchronize(l->stream) != CUDA_SUCCESS) ok = false;  // (what was queued ends here)
    b->st.store(ok ? NM_OK : NM_ERR_CUDA);
    b->done.store(true, std::memory_order_release);
}

void stage_pulls_issue()
{
    for (auto &x : lanes)
        if (x.second->open) {
            DeviceGuard g(x.second->dev->ctx);
            pulls_launch(x.second->open);
        }
}

nm_status_t stage_finish_begin(Stage *s, MPI_Status *recv_status)
{
    if (!s->dev || (!stage_has_out(s) && !s->decode)) return NM_OK;  // (a send: nothing comes back)
    DeviceGuard g(s->dev->ctx);
    Lane *l = s->lane;  // lanes live as long as the process
    if (!l) return NM_ERR_CUDA;
    // its pulls join the lane's open batch when the lane is this thread's (stage_pull_async)
    auto it = lanes.find(s->dev->ordinal);
    PullBatch *const *open = it != lanes.end() && it->second == l ? &l->open : nullptr;
    const size_t queued_before = open && *open ? (*open)->r.size() : 0;
    nm_status_t st = NM_OK;
    bool copied = false, truncated = false;
    // an envelope received into a non-contiguous buffer: its payload into the shadow, through the
    // datatype, before the shadow goes back whole (a truncated one: what fits goes back)
    if (s->decode && recv_status && recv_status != MPI_STATUS_IGNORE) {
        const int rc = env_finish(*s->decode, recv_status);
        if (rc == MPI_ERR_TRUNCATE) truncated = true;
        else if (rc != MPI_SUCCESS) st = NM_ERR_MPI;
    }
    for (int i = 0; i < s->n && st == NM_OK; i++) {
        if (!(s->r[i].dir & BUF_OUT)) continue;
        size_t len = s->r[i].len;
        MPI_Count got = MPI_UNDEFINED;
        // a receive that got an envelope (NCCLMPI_P2P_ENVELOPE): its payload into the shadow, or a
        // device payload straight into the device buffer, queued on the lane (nothing to copy back)
        if (s->r[i].received && recv_status && recv_status != MPI_STATUS_IGNORE && env_on()) {
            bool direct = false;
            const int rc = env_finish_bytes(s->r[i].host, len, recv_status, s->r[i].dev, &direct, l->stream, &s->rel[i]);
            if (rc == MPI_ERR_TRUNCATE) truncated = true;
            else if (rc != MPI_SUCCESS) st = NM_ERR_MPI;  // (what is queued still ends, and is released, below)
            copied = copied || s->rel[i].id;
            if (direct || st != NM_OK) continue;
        }
        if (s->r[i].counted && recv_status && recv_status != MPI_STATUS_IGNORE &&
            PMPI_Get_elements_x(recv_status, MPI_BYTE, &got) == MPI_SUCCESS && got != MPI_UNDEFINED && got >= 0 &&
            (size_t)got < len)
            len = (size_t)got;
        if (len) {  // (from a mapped shadow, on this thread's lane: with the other copies of this sweep,
                    // by one copy-kernel launch)
            if (s->r[i].mapped && open) {
                if (!stage_pull_async(s->r[i].dev, (CUdeviceptr)(uintptr_t)s->r[i].host, len, l->stream)) st = NM_ERR_CUDA;
            } else {
                NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)s->r[i].dev, (CUdeviceptr)s->r[i].host, len, l->stream),
                            st = NM_ERR_CUDA);
            }
            copied = true;
        }
    }
    if (st == NM_OK && truncated) st = NM_ERR_TRUNCATE;
    if (open && *open && (*open)->r.size() > queued_before) {  // done with the lane's batch (after its other copies)
        s->batch = l->open;
        s->batch->refs.fetch_add(1, std::memory_order_relaxed);
        s->fin = st;
        return NM_INPROGRESS;
    }
    if (copied && (s->done_ev = ev_get(s->dev)) && cu.cuEventRecord(s->done_ev, l->stream) == CUDA_SUCCESS) {
        s->fin = st;
        return NM_INPROGRESS;
    }
    if (copied) {  // no event: wait here
        if (s->done_ev) ev_put(s->dev, s->done_ev);
        s->done_ev = nullptr;
        NM_CU_CHECK(cu.cuStreamSynchronize(l->stream), st = NM_ERR_CUDA);
    }
    for (auto &r : s->rel) {
        env_release(r);
        r = EnvRelease();
    }
    return st;
}

// The copies of s's batch are done (NM_INPROGRESS: not yet); s leaves the batch when they are.
// (sweep: as op_poll's, the batch's event is asked once per progress sweep, not once per receive
// in it)
static nm_status_t batch_poll(Stage *s, bool wait, uint64_t sweep)
{
    PullBatch *b = s->batch;
    if (!b->issued) {  // (a blocking finish: this thread queued it)
        DeviceGuard g(b->lane->dev->ctx);
        pulls_launch(b);
    }
    if (!b->done.load(std::memory_order_acquire)) {
        if (!wait && sweep && b->notready_sweep.load(std::memory_order_relaxed) == sweep) return NM_INPROGRESS;
        DeviceGuard g(b->lane->dev->ctx);
        CUresult r = wait ? cu.cuEventSynchronize(b->ev) : cu.cuEventQuery(b->ev);
        if (r == CUDA_ERROR_NOT_READY) {
            if (sweep) b->notready_sweep.store(sweep, std::memory_order_relaxed);
            return NM_INPROGRESS;
        }
        if (r != CUDA_SUCCESS) b->st.store(NM_ERR_CUDA);
        b->done.store(true, std::memory_order_release);
    }
    const nm_status_t bst = (nm_status_t)b->st.load();
    s->batch = nullptr;
    if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (b->ev) ev_put(b->lane->dev, b->ev);
        delete b;
    }
    return bst;
}

nm_status_t stage_finish_poll(Stage *s, bool wait, uint64_t sweep)
{
    if (s->batch) {
        const nm_status_t bst = batch_poll(s, wait, sweep);
        if (bst == NM_INPROGRESS) return bst;
        if (bst != NM_OK && s->fin == NM_OK) s->fin = bst;
        for (auto &x : s->rel) {  // the payloads are read: their senders may reuse the memory
            env_release(x);
            x = EnvRelease();
        }
        return s->fin;
    }
    if (!s->done_ev) return s->fin;
    DeviceGuard g(s->dev->ctx);
    CUresult r = wait ? cu.cuEventSynchronize(s->done_ev) : cu.cuEventQuery(s->done_ev);
    if (r == CUDA_ERROR_NOT_READY) return NM_INPROGRESS;
    ev_put(s->dev, s->done_ev);
    s->done_ev = nullptr;
    if (r != CUDA_SUCCESS && s->fin == NM_OK) s->fin = NM_ERR_CUDA;
    for (auto &x : s->rel) {  // the payloads are read: their senders may reuse the memory
        env_release(x);
        x = EnvRelease();
    }
    return s->fin;
}

nm_status_t stage_finish(Stage *s, MPI_Status *recv_status)
{
    nm_status_t st = stage_finish_begin(s, recv_status);
    return st == NM_INPROGRESS ? stage_finish_poll(s, true) : st;
}

void stage_release(Stage *s)
{
    if (s->done_ev || s->batch) stage_finish_poll(s, true);  // (a copy back still running: never under way past here)
    if (s->in_ev) {  // (a queued copy in, never waited for)
        nm_status_t st;
        stage_in_wait(&s, 1, &st);
    }
    for (int i = 0; i < s->n; i++) pinned_put(s->r[i].host, s->r[i].cls);
    decode_free(s->decode);
    if (s->rtype_dup != MPI_DATATYPE_NULL) PMPI_Type_free(&s->rtype_dup);
    delete s;
}

}  // namespace ncclmpi
