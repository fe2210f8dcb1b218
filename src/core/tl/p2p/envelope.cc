// ncclmpi: point-to-point envelopes (see envelope.h).
#include "core/tl/p2p/envelope.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "core/comm/comm_state.h"
#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "core/cuda/kernels.h"
#include "core/cuda/memkind.h"
#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

#if NM_BUILD_HAVE_COMM_IS_REVOKED
extern "C" int PMPIX_Comm_is_revoked(MPI_Comm comm, int *flag);  // (Open MPI's <mpi-ext.h>)
#endif

namespace ncclmpi {

namespace {

bool device_mode = false;  // device sends go as envelopes (else host ones: the test mode)
uint64_t nonce[2];
int my_wrank = 0;
MPI_Comm rel_comm = MPI_COMM_NULL;  // releases travel here (a duplicate of MPI_COMM_WORLD)
enum { TAG_RELEASE = 1 };

struct Held {
    char *payload;  // host payload (NM_ENV_HOST)
    char *wire;
    int pool = -1;  // NM_ENV_IPC: the device pool (ordinal) and the block in it
    size_t off = 0, len = 0;
    int slot = -1;  // NM_ENV_IPC: the copy event its envelope names (a reference to it)
};

// A device pool per GPU of this process: cuMemAlloc'ed (so it can be exported), blocks handed out
// first-fit and returned when their receivers release them. Its first POOL_HEAD bytes hold the
// CUDA IPC handles of its copy events (slots): a payload's envelope goes out as soon as its copy
// into the pool is queued, naming the slot recorded after that copy, and the receiver's pull waits
// for it on the GPU (design.md, "Point-to-point envelopes"). A slot is recorded once per use and
// reused only when nothing refers to it any more: neither an envelope whose payload is not released
// (its receiver may not have queued its wait yet) nor a send whose request waits for the copy. A
// receiver therefore never waits for a later record than the one its envelope named, which could
// stand behind work of the sender's that waits for the receiver.
enum { NM_ENV_SLOTS = 64, POOL_HEAD = NM_ENV_SLOTS * (int)sizeof(CUipcEventHandle) };
struct Pool {
    CUdeviceptr base = 0;
    size_t size = 0;
    CUipcMemHandle handle;
    std::map<size_t, size_t> free_;  // offset -> length
    bool failed = false;
    CUevent slot_ev[NM_ENV_SLOTS] = {};  // interprocess events (none: every flush waits for its copies)
    int slot_refs[NM_ENV_SLOTS] = {};
    std::atomic<bool> slot_done[NM_ENV_SLOTS] = {};  // the copy it was recorded after is done
    std::atomic<uint64_t> slot_notready[NM_ENV_SLOTS] = {};  // the progress sweep that last found it not done
    std::vector<int> slot_free;
};
std::mutex pool_mu;
Pool pools[64];

// A copy between a pool's head and host memory, complete when it returns, on a stream of its own
// that does not follow the legacy stream: a synchronous copy (cuMemcpy) or a wait for the legacy
// stream would wait for whatever the application queued there, possibly work that waits for this
// very call to return (a send's first pool, a receive's first pull from a peer's pool, inside
// MPI_Waitall). The head depends on nothing the application queued.
bool head_copy(CUdeviceptr dst, const void *src, size_t n)
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
bool pool_slots(Pool &p)
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

long pool_alloc(int dev, size_t bytes)
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

void pool_free(int dev, size_t off, size_t bytes)
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
int slot_get(int dev)
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

void slot_ref(int dev, int s, int n)
{
    std::lock_guard<std::mutex> g(pool_mu);
    pools[dev].slot_refs[s] += n;
}

void slot_unref(int dev, int s)
{
    if (s < 0) return;
    std::lock_guard<std::mutex> g(pool_mu);
    Pool &p = pools[dev];
    if (--p.slot_refs[s] == 0) p.slot_free.push_back(s);
}

// The event to record after a payload's copy on device d: a copy event of d's pool (slot >= 0, one
// reference held) when one is free, else, with `plain`, one of the device's plain events (the
// envelope then waits for the copy on the host), else none.
struct CopyMark {
    CUevent ev = nullptr;
    int slot = -1;
};
CopyMark mark_get(Device *d, bool plain)
{
    CopyMark m;
    if ((m.slot = slot_get(d->ordinal)) >= 0) m.ev = pools[d->ordinal].slot_ev[m.slot];
    else if (plain) m.ev = ev_get(d);
    return m;
}
void mark_put(Device *d, const CopyMark &m)
{
    if (m.slot >= 0) slot_unref(d->ordinal, m.slot);
    else if (m.ev) ev_put(d, m.ev);
}

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
// had. A peer's comes from its pool's head, read and opened at the first use.
CUevent slot_event(const Envelope &e, int own_pool)
{
    if (own_pool >= 0) return pools[own_pool].slot_ev[e.slot];
    std::lock_guard<std::mutex> g(map_mu);
    PeerPool *pp = peer_pool(e);
    if (!pp) return nullptr;
    if (!pp->head_read) {
        if (!head_copy((CUdeviceptr)(uintptr_t)pp->head, (const void *)(uintptr_t)pp->base, sizeof(pp->head))) return nullptr;
        pp->head_read = true;
    }
    if (!pp->ev[e.slot] && cu.cuIpcOpenEventHandle(&pp->ev[e.slot], pp->head[e.slot]) != CUDA_SUCCESS) {
        pp->ev[e.slot] = nullptr;
        pp->head_read = false;  // (read again next time)
        return nullptr;
    }
    return pp->ev[e.slot];
}
std::mutex mu;
std::unordered_map<uint32_t, Held> held;  // payloads waiting for their receivers
uint32_t next_id = 1;
struct Rel {
    MPI_Request req;
    std::vector<uint32_t> *ids;
};
std::vector<Rel> releases;  // release messages in flight
std::atomic<size_t> inflight{0};  // held + releases, read without the lock (env_progress's test)
void count_inflight() { inflight.store(held.size() + releases.size(), std::memory_order_relaxed); }  // (under mu)
unsigned long long sent_count = 0;
unsigned long long release_msgs = 0;  // release messages sent (under mu)

// Messages a probe took out of the real MPI's matching, per communicator, in the order they
// arrived from each source (see env_probe): a raw message not received yet (its real handle), an
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
MPI_Comm self_comm = MPI_COMM_NULL;     // fabricated message handles come from here
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

// One release message: the payloads ids[0..n) of world rank wrank go back to its pool.
void release_send(int wrank, const uint32_t *ids, size_t n)
{
    Rel r{MPI_REQUEST_NULL, new std::vector<uint32_t>(ids, ids + n)};
    PMPI_Isend(r.ids->data(), (int)n, MPI_UINT32_T, wrank, TAG_RELEASE, rel_comm, &r.req);
    std::lock_guard<std::mutex> g(mu);
    releases.push_back(r);
    release_msgs++;
    count_inflight();
}

// env_releases_hold: this thread's releases wait here, to go as one message per sender (the
// counts initial-exec: every progress sweep reads them without a TLS lookup call)
thread_local int rel_depth __attribute__((tls_model("initial-exec"))) = 0;
thread_local int rel_nheld __attribute__((tls_model("initial-exec"))) = 0;
thread_local std::vector<std::pair<int, uint32_t>> rel_held;  // (world rank, id)

void release(int wrank, uint32_t id)
{
    if (rel_depth) {
        rel_held.emplace_back(wrank, id);
        rel_nheld++;
    } else {
        release_send(wrank, &id, 1);
    }
}

// Pull n bytes of e's payload into dst (host or device memory). false when it cannot (another
// node, ptrace restrictions, no peer access).
bool pull_host(void *dst, int pid, uint64_t addr, size_t n);
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
bool pull(void *dst, const Envelope &e, size_t n, CUstream stream = nullptr, bool to_host = false)
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

bool pull_host(void *dst, int pid, uint64_t addr, size_t n)
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

// The envelope in `wire`, if it is one of this job's.
bool decode(const char *wire, Envelope *e)
{
    memcpy(e, wire, sizeof(*e));
    return e->nonce[0] == nonce[0] && e->nonce[1] == nonce[1];
}

}  // namespace

void env_init()
{
    nm_env_active = strcmp(nm_cfg.P2P_ENVELOPE, "off") != 0;
    if (!nm_env_active) return;
    const bool autom = !strcmp(nm_cfg.P2P_ENVELOPE, "auto");
    device_mode = autom || !strcmp(nm_cfg.P2P_ENVELOPE, "device");
    PMPI_Comm_rank(MPI_COMM_WORLD, &my_wrank);
    // Decided by all ranks together, so that every rank decodes where any rank may send: every
    // rank on one node (the pull reads another process's memory); with auto also every one on a
    // machine with NVIDIA GPUs and with the same CUDA_VISIBLE_DEVICES (so a receiver sees the GPU
    // that a sender's payload waits on, and can open its pool): route.h's nm_env_vote_*.
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int hl = 0;
    PMPI_Get_processor_name(host, &hl);
    const char *cvd = nm_config_foreign("CUDA_VISIBLE_DEVICES");
    long long mine[NM_ENV_VOTE_N], all[NM_ENV_VOTE_N];
    nm_env_vote_mine(mine, nm_hash_str(host), nm_hash_str(cvd ? cvd : "(unset)"), autom && nm_gpu_node(), autom);
    world_max(mine, all, NM_ENV_VOTE_N, "ncclmpi's point-to-point envelope decision");
    if (const char *off = nm_env_vote_off(mine, all, autom)) {  // every rank turns them off: nothing to decode
        NM_INFO(INIT, "point-to-point envelopes off: %s", off);
        nm_env_active = 0;
        nm_envelopes_configured = 0;  // (MPI_Init: no other thread calls MPI yet)
        device_mode = false;
        return;
    }
    if (my_wrank == 0) {
        int fd = open("/dev/urandom", O_RDONLY);
        if (fd < 0 || read(fd, nonce, sizeof(nonce)) != (ssize_t)sizeof(nonce)) {
            nonce[0] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(nullptr);
            nonce[1] = nonce[0] * 0xBF58476D1CE4E5B9ull + 1;
        }
        if (fd >= 0) close(fd);
    }
    PMPI_Bcast(nonce, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    PMPI_Comm_dup(MPI_COMM_WORLD, &rel_comm);
    PMPI_Comm_dup(MPI_COMM_SELF, &self_comm);
    NM_INFO(INIT, "point-to-point envelopes on: %s messages of %zu bytes and more", device_mode ? "device" : "host (test mode)",
            (size_t)nm_cfg.P2P_ENVELOPE_MIN);
}

bool env_device() { return device_mode; }

static nm_p2p_limits_t limits_of_settings()
{
    return nm_p2p_limits_t{(size_t)nm_cfg.P2P_ENVELOPE_MIN, (size_t)nm_cfg.P2P_COPY_BATCH, 1};
}

NodeGpus node_gpus()
{
    NodeGpus n{1, 0, 0};
    PMPI_Comm_size(MPI_COMM_WORLD, &n.world_size);
    CUdevice d0;
    if (cu.cuDeviceGetCount(&n.gpus) != CUDA_SUCCESS) n.gpus = 0;
    // CU_DEVICE_ATTRIBUTE_MPS_ENABLED (133): 1 where this process's contexts go through an MPS
    // server; a driver that does not know it answers an error: no MPS
    if (n.gpus <= 0 || cu.cuDeviceGet(&d0, 0) != CUDA_SUCCESS ||
        cu.cuDeviceGetAttribute(&n.mps, (CUdevice_attribute)133, d0) != CUDA_SUCCESS)
        n.mps = 0;
    return n;
}

// With auto (device envelopes on: every rank is on this node and sees the same GPUs, env_init's
// vote), ranks over visible GPUs is the job's ranks per GPU on the node (were every rank to use
// one); with device, the settings as they are.
static nm_p2p_limits_t limits_of_node()
{
    if (strcmp(nm_cfg.P2P_ENVELOPE, "auto")) return limits_of_settings();
    const NodeGpus n = node_gpus();
    const nm_p2p_limits_t l = nm_p2p_limits(n.world_size, n.gpus, n.mps, (size_t)nm_cfg.P2P_ENVELOPE_MIN, nm_cfg_from_env("P2P_ENVELOPE_MIN"),
                                            (size_t)nm_cfg.P2P_COPY_BATCH, nm_cfg_from_env("P2P_COPY_BATCH"));
    if (l.ranks_per_gpu > 1)
        NM_INFO(P2P, "%d ranks share %d GPU(s) without MPS (up to %d per GPU, whose work the GPU time-slices): device "
                "messages of %zu bytes and more go as envelopes, smaller ones are staged; copy kernels %s",
                n.world_size, n.gpus, l.ranks_per_gpu, l.envelope_min, l.copy_batch ? "on" : "off");
    return l;
}

const nm_p2p_limits_t &env_limits()
{
    static const nm_p2p_limits_t settings = limits_of_settings();
    if (!device_mode || !cuda_attached()) return settings;
    static const nm_p2p_limits_t node = limits_of_node();  // (thread-safe once)
    return node;
}

bool env_comm(MPI_Comm comm)
{
    if (!nm_env_active || comm == MPI_COMM_NULL) return false;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    return !inter;
}

static bool send_mode(int fn)
{
    return fn == NM_FN_Send || fn == NM_FN_Ssend || fn == NM_FN_Rsend || fn == NM_FN_Isend || fn == NM_FN_Issend ||
           fn == NM_FN_Irsend;  // buffered sends stay as they are (their buffer accounting is the user's)
}

static void held_free(const Held &h)
{
    free(h.payload);
    free(h.wire);
    if (h.pool >= 0) {
        slot_unref(h.pool, h.slot);
        pool_free(h.pool, h.off, h.len);
    }
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

// The whole elements of n packed bytes at src into count elements of type at buf: in pieces of at
// most 1 GiB (the real MPI's insize is an int).
static bool unpack_pieces(const char *src, size_t n, void *buf, int count, MPI_Datatype type, MPI_Comm comm)
{
    const DtypeInfo *di = dtype_info(type);
    if (!di || !di->size) return true;  // (nothing to unpack)
    const long long elems = std::min<long long>((long long)(n / di->size), count);
    const int per = nm_piece_elems(di->size, 1u << 30);
    for (long long done = 0; done < elems;) {
        const int k = (int)std::min<long long>(per, elems - done);
        int pos = 0;
        if (PMPI_Unpack(src + (size_t)done * di->size, (int)((size_t)k * di->size), &pos,
                        (char *)buf + (MPI_Aint)done * di->extent, k, type, comm) != MPI_SUCCESS)
            return false;
        done += k;
    }
    return true;
}

// Pulls e's payload into a receive buffer (the contiguous span of cap bytes at `span`, or through
// buf/count/type when not contiguous), releases it, and sets *n to the bytes delivered. Returns an
// MPI code (MPI_ERR_TRUNCATE when the payload does not fit).
// to_host: span is host memory.
static int pull_payload(const Envelope &e, char *span, size_t cap, bool contiguous, void *buf, int count,
                        MPI_Datatype type, MPI_Comm comm, size_t *n, bool to_host, CUstream stream = nullptr,
                        EnvRelease *later = nullptr)
{
    *n = std::min<size_t>(e.bytes, cap);
    bool ok;
    const bool queued = contiguous && stream && later && e.transport == NM_ENV_IPC;
    if (contiguous) {
        ok = pull(span, e, *n, queued ? stream : nullptr, to_host);
    } else {
        std::vector<char> tmp(*n);
        ok = pull(tmp.data(), e, *n, nullptr, true) && unpack_pieces(tmp.data(), *n, buf, count, type, comm);
    }
    if (queued && ok) {
        later->wrank = e.wrank;
        later->id = e.id;
    } else {
        release(e.wrank, e.id);  // (a payload that cannot be read is given back too)
    }
    if (!ok) {
        char msg[MPI_MAX_ERROR_STRING];
        snprintf(msg, sizeof(msg), "ncclmpi: cannot read a point-to-point payload from process %d%s", e.pid,
                 e.transport == NM_ENV_IPC ? " (its GPU memory, over CUDA IPC); where ranks cannot map each other's GPU "
                                             "memory, set NCCLMPI_P2P_ENVELOPE=off"
                                           : "");
        NM_ERROR(CALL, "%s (%llu bytes)", msg + 9, (unsigned long long)e.bytes);
        return nm_error_code(MPI_ERR_OTHER, msg);
    }
    return e.bytes > cap ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
}

// The bytes a status counts. Open MPI keeps them in the status itself (its public struct, the same
// since 1.x): read there, as the real MPI_Get_elements_x would, without a call (every receive on
// a communicator that may carry envelopes asks); elsewhere, through the real MPI.
static inline MPI_Count status_bytes(const MPI_Status *st)
{
#if defined(OPEN_MPI) && OPEN_MPI
    return (MPI_Count)st->_ucount;
#else
    MPI_Count n = MPI_UNDEFINED;
    return PMPI_Get_elements_x(st, MPI_BYTE, &n) == MPI_SUCCESS ? n : MPI_UNDEFINED;
#endif
}

static int finish_at(char *span, size_t cap, bool contiguous, const Decode *d, MPI_Status *st, void *dev_at = nullptr,
                     bool *direct = nullptr, CUstream stream = nullptr, EnvRelease *later = nullptr)
{
    if (d && d->has_preset) {  // delivered from the probe queue when the call was made
        st->MPI_SOURCE = d->preset.MPI_SOURCE;
        st->MPI_TAG = d->preset.MPI_TAG;
        MPI_Count c = 0;
        PMPI_Get_elements_x(&d->preset, MPI_BYTE, &c);
        PMPI_Status_set_elements_x(st, MPI_BYTE, c);
        return d->preset_rc;
    }
    int cancelled = 0;
    if (status_bytes(st) != NM_ENV_WIRE) return MPI_SUCCESS;
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled) return MPI_SUCCESS;
    char wire[NM_ENV_WIRE + 3];
    if (contiguous) {
        memcpy(wire, span, NM_ENV_WIRE);
    } else {  // the envelope landed through the datatype: pack its first elements back out (a
              // buffer of any size: never the whole of it)
        const DtypeInfo *di = dtype_info(d->type);
        const int k = (int)nm_prefix_elems(d->count, di ? di->size : 0, NM_ENV_WIRE);
        int psz = 0, pos = 0;
        if (PMPI_Pack_size(k, d->type, d->comm, &psz) != MPI_SUCCESS || psz < NM_ENV_WIRE) return MPI_SUCCESS;
        std::vector<char> packed((size_t)psz);
        if (PMPI_Pack(d->buf, k, d->type, packed.data(), psz, &pos, d->comm) != MPI_SUCCESS || pos < NM_ENV_WIRE)
            return MPI_SUCCESS;
        memcpy(wire, packed.data(), NM_ENV_WIRE);
    }
    Envelope e;
    if (!decode(wire, &e)) return MPI_SUCCESS;  // a message of that size, not an envelope
    size_t n = 0;
    if (dev_at && e.transport == NM_ENV_IPC) {  // a device payload straight into the device buffer
        span = (char *)dev_at;
        *direct = true;
    }
    const bool to_device = span == dev_at;  // (queued copies go to device memory only)
    int rc = pull_payload(e, span, cap, contiguous, d ? d->buf : nullptr, d ? d->count : 0,
                          d ? d->type : MPI_DATATYPE_NULL, d ? d->comm : MPI_COMM_WORLD, &n, !to_device,
                          to_device ? stream : nullptr, later);
    if (rc == MPI_SUCCESS || rc == MPI_ERR_TRUNCATE) PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)n);
    return rc;
}

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

static FreeList<Decode> decode_pool;

Decode *decode_new(const Decode &init)
{
    Decode *d = decode_pool.get();
    *d = init;
    return d;
}

void decode_free(Decode *d)
{
    if (d) decode_pool.put(d);
}

int env_finish(const Decode &d, MPI_Status *st)
{
    if (!nm_env_active || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    // (most messages are not of the envelope's size: nothing more to do)
    if (!d.has_preset && status_bytes(st) != NM_ENV_WIRE) return MPI_SUCCESS;
    const DtypeInfo *di = dtype_info(d.type);
    if (!di || d.count <= 0) return MPI_SUCCESS;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(di, 0, d.count, &lo, &hi);
    const size_t cap = (size_t)d.count * di->size;
    return finish_at((char *)d.buf + lo, cap, di->contig, &d, st);
}

int env_finish_bytes(void *at, size_t cap, MPI_Status *st, void *dev_at, bool *direct, CUstream stream, EnvRelease *later)
{
    *direct = false;
    if (!nm_env_active || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    return finish_at((char *)at, cap, true, nullptr, st, dev_at, direct, stream, later);
}

void env_release(const EnvRelease &r)
{
    if (r.id) release(r.wrank, r.id);
}

void env_releases_hold(bool on)
{
    if (on) {
        rel_depth++;
        return;
    }
    if (--rel_depth > 0 || !rel_nheld) return;
    std::stable_sort(rel_held.begin(), rel_held.end(),
                     [](const std::pair<int, uint32_t> &a, const std::pair<int, uint32_t> &b) { return a.first < b.first; });
    std::vector<uint32_t> ids;
    for (size_t i = 0; i < rel_held.size();) {
        const int wrank = rel_held[i].first;
        ids.clear();
        for (; i < rel_held.size() && rel_held[i].first == wrank; i++) ids.push_back(rel_held[i].second);
        release_send(wrank, ids.data(), ids.size());
    }
    rel_held.clear();
    rel_nheld = 0;
}

void env_progress()
{
    if (!nm_env_active || !inflight.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> g(mu, std::try_to_lock);
    if (!g.owns_lock()) return;
    for (size_t i = 0; i < releases.size();) {
        int flag = 0;
        PMPI_Test(&releases[i].req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            delete releases[i].ids;
            releases[i] = releases.back();
            releases.pop_back();
        } else {
            i++;
        }
    }
    count_inflight();
    while (!held.empty()) {
        int flag = 0;
        MPI_Status st;
        PMPI_Iprobe(MPI_ANY_SOURCE, TAG_RELEASE, rel_comm, &flag, &st);
        if (!flag) break;
        int n = 0;  // (one message: the payloads a receiver's progress sweep released)
        PMPI_Get_count(&st, MPI_UINT32_T, &n);
        uint32_t few[16];
        std::vector<uint32_t> many(n > 16 ? (size_t)n : 0);
        uint32_t *ids = n > 16 ? many.data() : few;
        PMPI_Recv(ids, n, MPI_UINT32_T, st.MPI_SOURCE, TAG_RELEASE, rel_comm, MPI_STATUS_IGNORE);
        for (int k = 0; k < n; k++) {
            auto it = held.find(ids[k]);
            if (it == held.end()) continue;
            held_free(it->second);
            held.erase(it);
        }
    }
    count_inflight();
}

void env_drain()
{
    if (!nm_env_active) return;
    NM_INFO(CALL, "%llu point-to-point message(s) went as envelopes; %llu release message(s) sent", sent_count, release_msgs);
    const double t0 = nm_now_s();
    for (;;) {
        env_progress();
        {
            std::lock_guard<std::mutex> g(mu);
            if ((held.empty() && releases.empty()) || nm_now_s() - t0 > 2.0) {
                if (!held.empty())
                    NM_WARN(CALL, "MPI_Finalize: %zu point-to-point payload(s) never received (or received with "
                            "MPI_ERR_TRUNCATE into a buffer too small for them)", held.size());
                return;
            }
        }
        sched_yield();
    }
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
    PMPI_Send(nullptr, 0, MPI_BYTE, 0, tag, self_comm);
    MPI_Message m = MPI_MESSAGE_NULL;
    PMPI_Mprobe(0, tag, self_comm, &m, MPI_STATUS_IGNORE);
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
        const int rc = nm_real_fns[o->fn](o);
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

int nm_env_active = 0;
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

// how many messages went as envelopes (tests look it up with dlsym)
extern "C" __attribute__((visibility("default"))) unsigned long long ncclmpi_test_envelopes_sent(void)
{
    return sent_count;
}
