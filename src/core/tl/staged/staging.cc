// ncclmpi: staging through pinned host memory.
#include "core/tl/staged/staging.h"

#include <hwloc.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/comm/comm_state.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

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
    {
        DeviceGuard dg(d->ctx);
        NM_CU_CHECK(cu.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), delete d; return nullptr);
        NM_CU_CHECK(cu.cuStreamCreate(&d->stream2, CU_STREAM_NON_BLOCKING), delete d; return nullptr);
        NM_CU_CHECK(cu.cuEventCreate(&d->order_ev, CU_EVENT_DISABLE_TIMING), delete d; return nullptr);
        for (int i = 0; i < 2; i++) {
            NM_CU_CHECK(cu.cuEventCreate(&d->in_ev[i], CU_EVENT_DISABLE_TIMING), delete d; return nullptr);
            NM_CU_CHECK(cu.cuEventCreate(&d->out_ev[i], CU_EVENT_DISABLE_TIMING), delete d; return nullptr);
        }
    }
    d->numa = numa_of(ordinal);
    NM_INFO(STAGE, "device %d: staging through NUMA node %d", ordinal, d->numa);
    devices[ordinal] = d;
    return d;
}

nm_status_t order_after_app(Device *d, CUstream s)
{
    if (!nm_cfg.STREAM_ORDER) return NM_OK;
    NM_CU_CHECK(cu.cuEventRecord(d->order_ev, CU_STREAM_LEGACY), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuStreamWaitEvent(s, d->order_ev, 0), return NM_ERR_CUDA);
    return NM_OK;
}

// ---------------------------------------------------------------------------------------------
// Pinned pool: power-of-two classes from 64 KiB, cached up to NCCLMPI_STAGE_POOL bytes.
// ---------------------------------------------------------------------------------------------
static std::mutex pool_mu;
static std::multimap<size_t, void *> pool_free;  // class size -> buffer
static size_t pool_cached;
static std::map<void *, bool> pool_hwloc;  // buffer -> allocated by hwloc (else cuMemAllocHost)

static size_t size_class(size_t n)
{
    size_t c = 64 << 10;
    while (c < n) c <<= 1;
    return c;
}

void *pinned_get(size_t bytes, Device *dev, size_t *got)
{
    size_t cls = size_class(bytes);
    *got = cls;
    {
        std::lock_guard<std::mutex> g(pool_mu);
        auto it = pool_free.find(cls);
        if (it != pool_free.end()) {
            void *p = it->second;
            pool_free.erase(it);
            pool_cached -= cls;
            return p;
        }
    }
    void *p = nullptr;
    bool by_hwloc = false;
    if (dev && dev->numa >= 0 && topo_ready) {
        hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)dev->numa);
        if (node) p = hwloc_alloc_membind(topo, cls, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
        if (p && cu.cuMemHostRegister(p, cls, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
            hwloc_free(topo, p, cls);
            p = nullptr;
        }
        by_hwloc = p != nullptr;
    }
    if (!p && cu.cuMemAllocHost(&p, cls) != CUDA_SUCCESS) return nullptr;
    std::lock_guard<std::mutex> g(pool_mu);
    pool_hwloc[p] = by_hwloc;
    return p;
}

static void pinned_free(void *p, size_t cls)
{
    bool by_hwloc = pool_hwloc[p];
    pool_hwloc.erase(p);
    if (by_hwloc) {
        cu.cuMemHostUnregister(p);
        hwloc_free(topo, p, cls);
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
};

struct Stage {
    Device *dev = nullptr;
    Region r[2];
    int n = 0;
};

nm_status_t stage_in(nm_op_t *o, const BufRef *b, int nb, Stage **out)
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
        r.host = (char *)pinned_get(r.len, s->dev, &r.cls);
        if (!r.host) {
            NM_ERROR(STAGE, "cannot allocate %zu bytes of pinned host memory", r.len);
            stage_release(s);
            return NM_ERR_NO_MEM;
        }
        s->n++;
        char *shadow = r.host - b[i].lo;  // where the caller's pointer maps
        if (b[i].is_recv) o->rbuf = shadow;
        else o->sbuf = shadow;
        if (o->kind == NM_OPK_BCAST || o->kind == NM_OPK_SENDRECV_REPLACE) o->sbuf = o->rbuf;
        if (b[i].dir == BUF_OUT && !b[i].dense) r.dir = BUF_INOUT;  // keep the gaps' contents
    }
    if (s->dev) {
        DeviceGuard g(s->dev->ctx);
        nm_status_t st = order_after_app(s->dev, s->dev->stream);
        for (int i = 0; i < s->n && st == NM_OK; i++)
            if (s->r[i].dir & BUF_IN)
                NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)s->r[i].host, (CUdeviceptr)s->r[i].dev, s->r[i].len,
                                             s->dev->stream), st = NM_ERR_CUDA);
        if (st == NM_OK) NM_CU_CHECK(cu.cuStreamSynchronize(s->dev->stream), st = NM_ERR_CUDA);
        if (st != NM_OK) { stage_release(s); return st; }
    }
    o->flags |= NM_OPF_STAGED;
    o->stage = reinterpret_cast<struct nm_stage *>(s);
    *out = s;
    return NM_OK;
}

nm_status_t stage_finish(Stage *s)
{
    if (!s->dev) return NM_OK;
    DeviceGuard g(s->dev->ctx);
    nm_status_t st = NM_OK;
    for (int i = 0; i < s->n && st == NM_OK; i++)
        if (s->r[i].dir & BUF_OUT)
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)s->r[i].dev, (CUdeviceptr)s->r[i].host, s->r[i].len,
                                         s->dev->stream), st = NM_ERR_CUDA);
    if (st == NM_OK) NM_CU_CHECK(cu.cuStreamSynchronize(s->dev->stream), st = NM_ERR_CUDA);
    return st;
}

bool stage_pipeline_applies(const nm_op_t *o)
{
    if ((o->flags & NM_OPF_NB) || nm_cfg.AGREE) return false;  // every rank must chunk alike
    if (o->kind != NM_OPK_ALLREDUCE && o->kind != NM_OPK_REDUCE && o->kind != NM_OPK_BCAST && o->kind != NM_OPK_SCAN)
        return false;
    const DtypeInfo *d = dtype_info(o->rtype);
    return d && d->contig && (double)o->rcount * d->size > 2.0 * nm_cfg.STAGE_CHUNK;
}

nm_status_t stage_pipelined(const nm_op_t *o, const CommState *cs, int device, int *mpi_rc)
{
    const DtypeInfo *d = dtype_info(o->rtype);
    const size_t esz = (size_t)d->extent;
    const bool root = (o->kind == NM_OPK_REDUCE || o->kind == NM_OPK_BCAST) ? cs->rank == o->root : true;
    const bool inplace = o->sbuf == MPI_IN_PLACE;
    const char *src = (const char *)(inplace || o->kind == NM_OPK_BCAST ? o->rbuf : o->sbuf) + d->true_lb;
    char *dst = (char *)o->rbuf + d->true_lb;
    const bool in = o->kind != NM_OPK_BCAST || root;           // this rank copies data in
    const bool out = o->kind == NM_OPK_BCAST ? !root : o->kind != NM_OPK_REDUCE || root;  // and results out
    Device *dev = device_get(device);
    if (!dev) return NM_ERR_CUDA;
    const size_t ce = nm_cfg.STAGE_CHUNK / esz ? nm_cfg.STAGE_CHUNK / esz : 1;
    const long long nchunks = ((long long)o->rcount + (long long)ce - 1) / (long long)ce;
    size_t cls[2];
    char *slot[2] = {(char *)pinned_get(ce * esz, dev, &cls[0]), (char *)pinned_get(ce * esz, dev, &cls[1])};
    nm_status_t st = slot[0] && slot[1] ? NM_OK : NM_ERR_NO_MEM;
    *mpi_rc = MPI_SUCCESS;
    DeviceGuard g(dev->ctx);
    if (st == NM_OK) st = order_after_app(dev, dev->stream);
    if (st == NM_OK) st = order_after_app(dev, dev->stream2);
    auto elems = [&](long long k) { return (int)std::min<long long>((long long)ce, o->rcount - k * (long long)ce); };
    auto copy_in = [&](long long k) -> nm_status_t {
        if (!in) return NM_OK;
        NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)slot[k & 1], (CUdeviceptr)(src + k * ce * esz), elems(k) * esz,
                                     dev->stream), return NM_ERR_CUDA);
        NM_CU_CHECK(cu.cuEventRecord(dev->in_ev[k & 1], dev->stream), return NM_ERR_CUDA);
        return NM_OK;
    };
    if (st == NM_OK && nchunks) st = copy_in(0);
    for (long long k = 0; k < nchunks && st == NM_OK && *mpi_rc == MPI_SUCCESS; k++) {
        if (out && k >= 1 && k + 1 < nchunks) cu.cuEventSynchronize(dev->out_ev[(k + 1) & 1]);  // slot free again
        if (k + 1 < nchunks && (st = copy_in(k + 1)) != NM_OK) break;
        if (in) cu.cuEventSynchronize(dev->in_ev[k & 1]);
        else if (out && k >= 2) cu.cuEventSynchronize(dev->out_ev[k & 1]);
        void *h = slot[k & 1];
        int n = elems(k);
        switch (o->kind) {
        case NM_OPK_ALLREDUCE: *mpi_rc = PMPI_Allreduce(MPI_IN_PLACE, h, n, o->rtype, o->op, o->comm); break;
        case NM_OPK_SCAN: *mpi_rc = PMPI_Scan(MPI_IN_PLACE, h, n, o->rtype, o->op, o->comm); break;
        case NM_OPK_REDUCE:
            *mpi_rc = root ? PMPI_Reduce(MPI_IN_PLACE, h, n, o->rtype, o->op, o->root, o->comm)
                           : PMPI_Reduce(h, nullptr, n, o->rtype, o->op, o->root, o->comm);
            break;
        default: *mpi_rc = PMPI_Bcast(h, n, o->rtype, o->root, o->comm); break;
        }
        if (out && *mpi_rc == MPI_SUCCESS) {
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)(dst + k * ce * esz), (CUdeviceptr)h, (size_t)n * esz, dev->stream2),
                        st = NM_ERR_CUDA);
            NM_CU_CHECK(cu.cuEventRecord(dev->out_ev[k & 1], dev->stream2), st = NM_ERR_CUDA);
        }
    }
    cu.cuStreamSynchronize(dev->stream);
    cu.cuStreamSynchronize(dev->stream2);
    for (int i = 0; i < 2; i++)
        if (slot[i]) pinned_put(slot[i], cls[i]);
    NM_DEBUG(STAGE, "%s: %lld chunks of %zu bytes pipelined", nm_opkind_name(o->kind), nchunks, ce * esz);
    return st;
}

void stage_release(Stage *s)
{
    for (int i = 0; i < s->n; i++) pinned_put(s->r[i].host, s->r[i].cls);
    delete s;
}

}  // namespace ncclmpi
