// ncclmpi: point-to-point envelopes (envelope.h): init, limits, held payloads and their releases.
#include "core/tl/p2p/env_internal.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <ctime>

#include <algorithm>
#include <cstring>

#include "core/comm/comm_state.h"
#include "core/cuda/memkind.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

using namespace env;

bool env::device_mode = false;  // device sends go as envelopes (else host ones: the test mode)
uint64_t env::nonce[2];
int env::my_wrank = 0;
std::mutex env::mu;
std::unordered_map<uint32_t, Held> env::held;  // payloads waiting for their receivers
unsigned long long env::sent_count = 0;

namespace {

MPI_Comm rel_comm = MPI_COMM_NULL;  // releases travel here (a duplicate of MPI_COMM_WORLD)
enum { TAG_RELEASE = 1 };

struct Rel {
    MPI_Request req;
    std::vector<uint32_t> *ids;
};
std::vector<Rel> releases;  // release messages in flight
std::atomic<size_t> inflight{0};  // held + releases, read without the lock (env_progress's test)
unsigned long long release_msgs = 0;  // release messages sent (under mu)

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

}  // namespace

void env::count_inflight() { inflight.store(held.size() + releases.size(), std::memory_order_relaxed); }  // (under mu)

void env::release(int wrank, uint32_t id)
{
    if (rel_depth) {
        rel_held.emplace_back(wrank, id);
        rel_nheld++;
    } else {
        release_send(wrank, &id, 1);
    }
}

void env::held_free(const Held &h)
{
    free(h.payload);
    free(h.wire);
    if (h.pool >= 0) {
        slot_unref(h.pool, h.slot);
        pool_free(h.pool, h.off, h.len);
    }
}

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

}  // namespace ncclmpi

int nm_env_active = 0;

using namespace ncclmpi;

// how many messages went as envelopes (tests look it up with dlsym)
extern "C" __attribute__((visibility("default"))) unsigned long long ncclmpi_test_envelopes_sent(void)
{
    return sent_count;
}
