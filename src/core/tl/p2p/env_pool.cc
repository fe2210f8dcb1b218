// ncclmpi: the envelopes' device payload pools (blocks, copy events, peers' pools) and their pulls.
#include "core/tl/p2p/env_internal.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/comm/process_group.h"
#include "core/tl/staged/staging.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

using namespace env;

static std::mutex pool_mu;
Pool env::pools[64];

// A copy between a pool's head and host memory, complete when it returns, on a stream of its own
// that does not follow the legacy stream: a synchronous copy (cuMemcpy) or a wait for the legacy
// stream would wait for whatever the application queued there, possibly work that waits for this
// very call to return (a send's first pool, a receive's first pull from a peer's pool, inside
// MPI_Waitall). The head depends on nothing the application queued.
static bool head_copy(CUdeviceptr dst, const void *src, size_t n)
{
    CUstream s = nullptr;
    const bool ok = cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                    cu.cuMemcpyAsync(dst, (CUdeviceptr)(uintptr_t)src, n, s) == CUDA_SUCCESS &&
                    cu.cuStreamSynchronize(s) == CUDA_SUCCESS;
    if (s) cu.cuStreamDestroy(s);
    return ok;
}

// The copy events of pool p (made in the current context, its device's), their handles written
// into its head. false: none (the device cannot share events, or the driver refused): every
// envelope then waits for its payload's copy.
static bool pool_slots(Pool &p)
{
    int ok = 0;
    CUdevice dev;
    if (cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        cu.cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev) != CUDA_SUCCESS || !ok)
        return false;
    CUipcEventHandle h[NM_ENV_SLOTS];
    int n = 0;
    for (; n < NM_ENV_SLOTS; n++)
        if (cu.cuEventCreate(&p.slot_ev[n], CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
            cu.cuIpcGetEventHandle(&h[n], p.slot_ev[n]) != CUDA_SUCCESS)
            break;
    // (the head is complete before any envelope names a slot)
    if (n == NM_ENV_SLOTS && head_copy(p.base, h, sizeof(h))) {
        for (int i = NM_ENV_SLOTS; i-- > 0;) p.slot_free.push_back(i);
        return true;
    }
    for (int i = 0; i <= n && i < NM_ENV_SLOTS; i++)
        if (p.slot_ev[i]) cu.cuEventDestroy(p.slot_ev[i]);
    memset(p.slot_ev, 0, sizeof(p.slot_ev));
    return false;
}

long env::pool_alloc(int dev, size_t bytes)
{
    const size_t len = (bytes + 255) / 256 * 256;
    std::lock_guard<std::mutex> g(pool_mu);
    Pool &p = pools[dev];
    if (p.failed) return -1;
    if (!p.base) {
        Device *d = device_get(dev);
        if (!d) {
            p.failed = true;
            return -1;
        }
        DeviceGuard dg(d->ctx);
        p.size = (size_t)nm_cfg.P2P_POOL;
        if (cu.cuMemAlloc(&p.base, p.size) != CUDA_SUCCESS || cu.cuIpcGetMemHandle(&p.handle, p.base) != CUDA_SUCCESS) {
            NM_WARN(CALL, "no device pool for point-to-point envelopes on device %d: device sends stay staged", dev);
            p.failed = true;
            if (p.base) cu.cuMemFree(p.base);
            p.base = 0;
            return -1;
        }
        const bool slots = pool_slots(p);
        NM_INFO(CALL, "device %d: a pool of %zu bytes for point-to-point payloads%s", dev, p.size,
                slots ? ", with copy events the receivers wait for" : " (no copy events between processes: each envelope waits for its payload's copy)");
        p.free_[POOL_HEAD] = p.size - POOL_HEAD;
    }
    for (auto it = p.free_.begin(); it != p.free_.end(); ++it)
        if (it->second >= len) {
            const size_t off = it->first, rest = it->second - len;
            p.free_.erase(it);
            if (rest) p.free_[off + len] = rest;
            return (long)off;
        }
    return -1;  // full: the caller stages this send
}

void env::pool_free(int dev, size_t off, size_t bytes)
{
    const size_t len = (bytes + 255) / 256 * 256;
    std::lock_guard<std::mutex> g(pool_mu);
    auto &f = pools[dev].free_;
    auto it = f.emplace(off, len).first;
    auto next = std::next(it);
    if (next != f.end() && it->first + it->second == next->first) {
        it->second += next->second;
        f.erase(next);
    }
    if (it != f.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == it->first) {
            prev->second += it->second;
            f.erase(it);
        }
    }
}

// A free copy event of pool `dev` with one reference (the caller's), or -1 (none: the caller waits
// for its copy itself).
static int slot_get(int dev)
{
    std::lock_guard<std::mutex> g(pool_mu);
    Pool &p = pools[dev];
    if (p.slot_free.empty()) {
        if (p.slot_ev[0]) NM_DEBUG(CALL, "device %d: every copy event is in use (payloads not yet released): this send waits for its copy", dev);
        return -1;
    }
    const int s = p.slot_free.back();
    p.slot_free.pop_back();
    p.slot_refs[s] = 1;
    p.slot_done[s].store(false, std::memory_order_relaxed);
    p.slot_notready[s].store(0, std::memory_order_relaxed);
    return s;
}

void env::slot_ref(int dev, int s, int n)
{
    std::lock_guard<std::mutex> g(pool_mu);
    pools[dev].slot_refs[s] += n;
}

void env::slot_unref(int dev, int s)
{
    if (s < 0) return;
    std::lock_guard<std::mutex> g(pool_mu);
    Pool &p = pools[dev];
    if (--p.slot_refs[s] == 0) p.slot_free.push_back(s);
}

CopyMark env::mark_get(Device *d, bool plain)
{
    CopyMark m;
    if ((m.slot = slot_get(d->ordinal)) >= 0) m.ev = pools[d->ordinal].slot_ev[m.slot];
    else if (plain) m.ev = ev_get(d);
    return m;
}
void env::mark_put(Device *d, const CopyMark &m)
{
    if (m.slot >= 0) slot_unref(d->ordinal, m.slot);
    else if (m.ev) ev_put(d, m.ev);
}

namespace {

// Peers' pools mapped into this process (by process and handle), with their copy events opened
struct PeerPool {
    CUdeviceptr base = 0;
    bool head_read = false;
    CUipcEventHandle head[NM_ENV_SLOTS];
    CUevent ev[NM_ENV_SLOTS] = {};
};
std::mutex map_mu;
std::map<std::string, PeerPool> mapped;

PeerPool *peer_pool(const Envelope &e)  // (under map_mu)
{
    std::string key = std::to_string(e.pid) + ":" + std::string(e.ipc, sizeof(e.ipc));
    auto it = mapped.find(key);
    if (it != mapped.end()) return &it->second;
    CUcontext ctx = nullptr;
    cu.cuCtxGetCurrent(&ctx);
    if (!ctx) {  // a receiving thread with no context: the first GPU's primary one
        CUdevice d0;
        if (cu.cuDeviceGet(&d0, 0) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, d0) != CUDA_SUCCESS) return nullptr;
        cu.cuCtxSetCurrent(ctx);
    }
    CUipcMemHandle h;
    memcpy(&h, e.ipc, sizeof(h));
    CUdeviceptr p = 0;
    if (cu.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return nullptr;
    PeerPool &pp = mapped[key];
    pp.base = p;
    return &pp;
}

// The copy event that e's payload waits behind (e.slot), in this process; null when it cannot be
// had. A peer's come from its pool's head, read at the first use, when all of them are opened:
// which slots a peer uses depends on when its receivers' releases arrived, and opening one later
// would put a driver call of unknown synchronisation into some later receive's completion (inside
// an MPI_Waitall while the application's legacy stream waits for the host, gpu_hazard 4c). A slot
// whose open failed is tried again at its next use.
CUevent slot_event(const Envelope &e, int own_pool)
{
    if (own_pool >= 0) return pools[own_pool].slot_ev[e.slot];
    std::lock_guard<std::mutex> g(map_mu);
    PeerPool *pp = peer_pool(e);
    if (!pp) return nullptr;
    if (!pp->head_read) {
        if (!head_copy((CUdeviceptr)(uintptr_t)pp->head, (const void *)(uintptr_t)pp->base, sizeof(pp->head))) return nullptr;
        pp->head_read = true;
        for (int i = 0; i < NM_ENV_SLOTS; i++)
            if (!pp->ev[i] && cu.cuIpcOpenEventHandle(&pp->ev[i], pp->head[i]) != CUDA_SUCCESS) pp->ev[i] = nullptr;
    }
    if (!pp->ev[e.slot] && cu.cuIpcOpenEventHandle(&pp->ev[e.slot], pp->head[e.slot]) != CUDA_SUCCESS) {
        pp->ev[e.slot] = nullptr;
        pp->head_read = false;  // (read again next time)
        return nullptr;
    }
    return pp->ev[e.slot];
}

}  // namespace

static bool pull_host(void *dst, int pid, uint64_t addr, size_t n);
// A copy out of a device pool on s, complete when it returns (cuMemcpy between device buffers
// returns before the copy is done: the receive would end early, and the sender could reuse the
// block before it was read).
static bool pool_copy(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, n, s) == CUDA_SUCCESS && cu.cuStreamSynchronize(s) == CUDA_SUCCESS;
}
// This thread's stream for pulls into host memory in the current context (made at its first use;
// the legacy stream where none can be made). It follows nothing of the application's: host memory
// being received into is the receive's alone until it completes, so its pull need not wait for the
// application's device work, which may have been queued after the receive's call and may wait for
// its completion (test/unit/legacy_hold.sh: a nonblocking receive into host memory, or through a
// datatype, completed in MPI_Waitall while the legacy stream was held).
static CUstream host_pull_stream()
{
    struct Mine {
        CUcontext ctx;
        unsigned long long id;  // (a context made again after a reset may have the same handle)
        CUstream s;
    };
    static thread_local std::vector<Mine> mine;
    CUcontext ctx = nullptr;
    unsigned long long id = 0;
    cu.cuCtxGetCurrent(&ctx);
    if (ctx && cu.cuCtxGetId) cu.cuCtxGetId(ctx, &id);
    for (const Mine &x : mine)
        if (x.ctx == ctx && x.id == id) return x.s;
    CUstream s = nullptr;
    if (!ctx || cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return CU_STREAM_LEGACY;
    mine.push_back(Mine{ctx, id, s});
    return s;
}
// stream: the copy of a device payload is only queued there. Otherwise the copy is complete when
// this returns: into host memory (to_host) on a stream of this thread's own, into device memory on
// the legacy stream, after the application's work there, as staged copies are.
bool env::pull(void *dst, const Envelope &e, size_t n, CUstream stream, bool to_host)
{
    if (e.transport == NM_ENV_HOST) return pull_host(dst, e.pid, e.addr, n);
    if (!n) return true;
    // a device payload in a process that never loaded CUDA (a host receive from a rank that sent
    // from its GPU): the driver comes in now, as reading another GPU's memory needs it
    if (!cuda_attached() && !cuda_load()) return false;
    if (!cuda_ctx_current()) return false;  // (a device reset here: cuda_api.h)
    CUdeviceptr base = 0;
    int own = -1;
    if (e.pid == getpid()) {  // our own pool
        for (int i = 0; i < 64; i++)
            if (pools[i].base && !memcmp(&pools[i].handle, e.ipc, sizeof(pools[i].handle))) {
                base = pools[i].base;
                own = i;
            }
    } else {
        std::lock_guard<std::mutex> g(map_mu);
        PeerPool *pp = peer_pool(e);
        base = pp ? pp->base : 0;
    }
    if (!base) return false;
    const CUstream s = stream ? stream : to_host ? host_pull_stream() : CU_STREAM_LEGACY;
    // the copy follows the sender's copy into its pool (the envelope left before that ended)
    if (e.slot >= 0 && e.slot < NM_ENV_SLOTS) {
        CUevent ev = slot_event(e, own);
        if (!ev || cu.cuStreamWaitEvent(s, ev, 0) != CUDA_SUCCESS) return false;
    }
    if (stream) return stage_pull_async(dst, base + e.addr, n, stream);
    return pool_copy(dst, base + e.addr, n, s);
}

static bool pull_host(void *dst, int pid, uint64_t addr, size_t n)
{
    if (pid == getpid()) {
        memcpy(dst, (const void *)(uintptr_t)addr, n);
        return true;
    }
    size_t done = 0;
    while (done < n) {
        struct iovec l = {(char *)dst + done, n - done}, r = {(void *)(uintptr_t)(addr + done), n - done};
        ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}

nm_status_t env_copy_poll(int pool, int slot, uint64_t sweep)
{
    Pool &p = pools[pool];
    if (p.slot_done[slot].load(std::memory_order_acquire)) return NM_OK;
    // (the sends of one batch share its event: asked once per sweep, as op_poll asks a launch's)
    if (sweep && p.slot_notready[slot].load(std::memory_order_relaxed) == sweep) return NM_INPROGRESS;
    Device *d = device_get(pool);
    if (!d) return NM_ERR_CUDA;
    DeviceGuard dg(d->ctx);
    const CUresult r = cu.cuEventQuery(p.slot_ev[slot]);
    if (r == CUDA_ERROR_NOT_READY) {
        if (sweep) p.slot_notready[slot].store(sweep, std::memory_order_relaxed);
        return NM_INPROGRESS;
    }
    if (r != CUDA_SUCCESS) return NM_ERR_CUDA;
    p.slot_done[slot].store(true, std::memory_order_release);  // (the other requests of its batch ask no more)
    return NM_OK;
}

void env_copy_drop(int pool, int slot) { slot_unref(pool, slot); }

}  // namespace ncclmpi
