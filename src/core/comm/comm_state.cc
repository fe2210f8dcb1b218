// ncclmpi: communicator states and the lifecycle of their process groups.
#include "core/comm/comm_state.h"

#include <string.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/engine/task.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

static std::recursive_mutex states_mu;
static std::vector<CommState *> states;  // live states, in creation order
static std::vector<ProcessGroup *> pg_order;  // live groups, in creation order
static int comm_keyval = MPI_KEYVAL_INVALID;
static int next_id;
static uint64_t comm_gen = 1;  // bumped whenever a state dies: invalidates the thread caches
static thread_local struct {
    MPI_Comm comm;
    CommState *cs;
    uint64_t gen;
} comm_cache;

static void forget_groups(CommState *cs)
{
    for (auto &kv : cs->pgs) {
        if (!kv.second) continue;
        pg_order.erase(std::remove(pg_order.begin(), pg_order.end(), kv.second.get()), pg_order.end());
    }
}

static int comm_delete_fn(MPI_Comm, int, void *val, void *)
{
    tasks_drain();  // nothing may still run on the groups we are about to destroy
    std::lock_guard<std::recursive_mutex> g(states_mu);
    CommState *cs = static_cast<CommState *>(val);
    __atomic_add_fetch(&comm_gen, 1, __ATOMIC_RELEASE);
    forget_groups(cs);
    states.erase(std::remove(states.begin(), states.end(), cs), states.end());
    delete cs;  // ProcessGroup destructors drain and destroy their NCCL comms
    return MPI_SUCCESS;
}

int world_rank()
{
    int r = -1, init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    if (init && !fin) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

CommState *comm_state(MPI_Comm comm)
{
    uint64_t gen = __atomic_load_n(&comm_gen, __ATOMIC_ACQUIRE);
    if (comm_cache.comm == comm && comm_cache.gen == gen && comm_cache.cs) return comm_cache.cs;
    CommState *cs = comm_state_lookup(comm);
    comm_cache.comm = comm;
    comm_cache.cs = cs;
    comm_cache.gen = gen;
    return cs;
}

CommState *comm_state_lookup(MPI_Comm comm)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    if (comm_keyval == MPI_KEYVAL_INVALID)
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete_fn, &comm_keyval, nullptr);
    void *val = nullptr;
    int found = 0;
    PMPI_Comm_get_attr(comm, comm_keyval, &val, &found);
    if (found) return static_cast<CommState *>(val);
    CommState *cs = new CommState;
    cs->comm = comm;
    cs->id = next_id++;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    cs->inter = inter != 0;
    PMPI_Comm_rank(comm, &cs->rank);
    PMPI_Comm_size(comm, &cs->size);
    cs->remote_size = cs->size;
    if (cs->inter) PMPI_Comm_remote_size(comm, &cs->remote_size);
    PMPI_Comm_set_attr(comm, comm_keyval, cs);
    states.push_back(cs);
    return cs;
}

std::string CommState::describe() const
{
    char b[96];
    snprintf(b, sizeof(b), "comm%d{rank %d/%d%s}", id, rank, size, inter ? ", inter" : "");
    return b;
}

// Every rank must have a GPU and no two ranks may share one; all ranks learn the same answer.
static bool distinct_gpus(const CommState &cs, int device)
{
    struct Entry {
        int ok;
        CUuuid uuid;
    } mine;
    memset(&mine, 0, sizeof(mine));
    CUdevice dev;
    mine.ok = device >= 0 && cu.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
              cu.cuDeviceGetUuid(&mine.uuid, dev) == CUDA_SUCCESS;
    std::vector<Entry> all(cs.size);
    PMPI_Allgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE, cs.comm);
    for (int i = 0; i < cs.size; i++) {
        if (!all[i].ok) {
            NM_INFO(INIT, "%s: rank %d has no usable GPU: staged path", cs.describe().c_str(), i);
            return false;
        }
        for (int j = 0; j < i; j++)
            if (!memcmp(&all[i].uuid, &all[j].uuid, sizeof(CUuuid))) {
                NM_INFO(INIT, "%s: ranks %d and %d share a GPU: staged path (NCCL needs one GPU per rank)",
                        cs.describe().c_str(), j, i);
                return false;
            }
    }
    return true;
}

ProcessGroup *CommState::group(int device, nm_status_t *st)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    *st = NM_OK;
    if (inter) return nullptr;
    auto it = pgs.find(device);
    if (it != pgs.end()) {
        ProcessGroup *pg = it->second.get();
        return pg && pg->state() == ProcessGroup::State::READY ? pg : nullptr;
    }
    // First device use of this communicator on this device: collective on every rank.
    std::unique_ptr<ProcessGroup> pg;
    if (distinct_gpus(*this, device)) {
        pg.reset(new ProcessGroup(comm, id, device, rank, size));
        int ok = pg->init_fresh() == NM_OK, all_ok = 0;
        PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
        if (!all_ok) {
            if (ok) NM_WARN(INIT, "%s: NCCL init failed on another rank: staged path", describe().c_str());
            pg.reset();
        }
    }
    ProcessGroup *p = pg.get();
    if (p) pg_order.push_back(p);
    pgs[device] = std::move(pg);
    nccl_ok = p ? 1 : 0;
    return p;
}

// Device for NCCLMPI_EAGER: the current context's, else local rank modulo the device count.
static int eager_device(MPI_Comm comm)
{
    int lrank = 0, n = 0;
    MPI_Comm node;  // collective: every member computes its node-local rank first
    PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    PMPI_Comm_rank(node, &lrank);
    PMPI_Comm_free(&node);
    CUcontext ctx = nullptr;
    CUdevice d;
    if (!cuda_attached()) return -1;
    if (cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && cu.cuCtxGetDevice(&d) == CUDA_SUCCESS) return (int)d;
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return -1;
    return lrank % n;
}

void comm_state_created(MPI_Comm parent, MPI_Comm child)
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    CommState *ps = nullptr;
    if (comm_keyval != MPI_KEYVAL_INVALID && parent != MPI_COMM_NULL) {
        void *val = nullptr;
        int found = 0;
        PMPI_Comm_get_attr(parent, comm_keyval, &val, &found);
        if (found) ps = static_cast<CommState *>(val);
    }
    bool split = false;
    if (ps && nm_cfg.SPLIT && nccl.ncclCommSplit) {
        for (auto &kv : ps->pgs) {
            ProcessGroup *ppg = kv.second.get();
            if (!ppg || ppg->state() != ProcessGroup::State::READY) continue;
            split = true;
            CommState *cs = child != MPI_COMM_NULL ? comm_state(child) : nullptr;
            int color = NCCL_SPLIT_NOCOLOR, key = 0;
            if (cs) {
                // color: the parent rank of the child's rank 0 (same on every member)
                MPI_Group pgp, cgp;
                int zero = 0;
                PMPI_Comm_group(parent, &pgp);
                PMPI_Comm_group(child, &cgp);
                PMPI_Group_translate_ranks(cgp, 1, &zero, pgp, &color);
                PMPI_Group_free(&pgp);
                PMPI_Group_free(&cgp);
                key = cs->rank;
            }
            std::unique_ptr<ProcessGroup> pg;
            int ok = 1, all_ok = 0;
            if (cs && !cs->inter) {
                pg.reset(new ProcessGroup(child, cs->id, kv.first, cs->rank, cs->size));
                ok = pg->init_split(*ppg, color, key) == NM_OK;
            } else if (!cs) {
                ncclComm_t none = nullptr;
                ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
                cfg.splitShare = 1;
                DeviceGuard dg(ppg->ctx());
                ok = nccl.ncclCommSplit(ppg->nccl_comm(), NCCL_SPLIT_NOCOLOR, 0, &none, &cfg) == ncclSuccess;
            }
            PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, parent);
            if (cs && !cs->inter) {
                if (all_ok) {
                    pg_order.push_back(pg.get());
                    cs->pgs[kv.first] = std::move(pg);
                    cs->nccl_ok = 1;
                } else {
                    NM_WARN(INIT, "%s: ncclCommSplit failed on some rank; NCCL comm made at first use instead",
                            cs->describe().c_str());
                }
            }
        }
    }
    if (!split && nm_cfg.EAGER && child != MPI_COMM_NULL) {
        int dev = eager_device(child);
        // every member must take part, also those without a current device
        int have = dev >= 0, all_have = 0;
        PMPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, child);
        if (all_have) {
            nm_status_t st;
            comm_state(child)->group(dev, &st);
        } else {
            NM_INFO(INIT, "NCCLMPI_EAGER: a rank has no current CUDA device; NCCL comm made at first use");
        }
    }
}

void comm_states_teardown()
{
    std::lock_guard<std::recursive_mutex> g(states_mu);
    // children (created later) before parents: split comms share their parent's resources
    for (auto it = pg_order.rbegin(); it != pg_order.rend(); ++it) (*it)->destroy();
    pg_order.clear();
    for (CommState *cs : states) {
        cs->pgs.clear();
        cs->nccl_ok = -1;
    }
}

}  // namespace ncclmpi
