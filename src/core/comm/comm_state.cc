// ncclmpi: communicator states and the lifecycle of their process groups.
//
// NCCL communicators are created only inside a blocking collective (every rank of the
// communicator is in it, in the same order: comm_create), after the ranks agree that each of
// them can take part (a GPU of its own, NCCL loaded): one PMPI_Allgather of every rank's
// readiness and kept sides (side_cache.h), so that every rank reaches the same answer: READY
// (with a kept NCCL communicator or a new one), or STAGED (with a shared-GPU window or none).
#include "core/comm/comm_state.h"
#include "core/comm/side_cache.h"
#include "core/tl/shared/shared_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/engine/deadline.h"
#include "core/engine/engine.h"
#include "core/tl/oneshot/oneshot.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/p2p/neighbor.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/watchdog.h"

extern "C" int nm_pending_comms;

namespace ncclmpi {

static std::mutex states_mu;                  // the registry below, never held across MPI calls
static std::vector<CommState *> states;       // live states, in creation order
static int comm_keyval = MPI_KEYVAL_INVALID;
static int next_id;
static uint64_t comm_gen = 1;                 // bumped whenever a state dies: invalidates the thread caches
static thread_local struct {
    MPI_Comm comm;
    CommState *cs;
    uint64_t gen;
} comm_cache __attribute__((tls_model("initial-exec")));  // static TLS: one load (see dtype.cc)

static int comm_delete_fn(MPI_Comm, int, void *val, void *)
{
    CommState *cs = static_cast<CommState *>(val);
    __atomic_add_fetch(&comm_gen, 1, __ATOMIC_RELEASE);
    {
        std::lock_guard<std::mutex> g(states_mu);
        states.erase(std::remove(states.begin(), states.end(), cs), states.end());
    }
    // Launch what is queued (nothing waits here for other communicators' work, nor for peers),
    // release the hidden duplicate (every rank frees this communicator, so every rank is here),
    // and let the last operation in flight destroy the NCCL communicator.
    engine_comm_freed(cs);
    neigh_comm_freed(cs);
    if (env_on()) env_comm_freed(cs->comm);  // (what a probe took out of matching there and nothing received)
    comm_release(cs);
    return MPI_SUCCESS;
}

void comm_release(CommState *cs)
{
    if (cs->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    side_park(cs);  // kept for a later communicator of the same processes, or destroyed
    delete cs;
}

void world_max(const long long *mine, long long *all, int n, const char *what)
{
    MPI_Request r = MPI_REQUEST_NULL;
    if (PMPI_Iallreduce(mine, all, n, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &r) != MPI_SUCCESS) return;
    const double t0 = nm_now_s();
    bool warned = false;
    for (int done = 0; !done;) {
        PMPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done && !warned && nm_cfg.WARN_AFTER > 0 && nm_now_s() - t0 > nm_cfg.WARN_AFTER) {
            NM_WARN(INIT, "MPI_Init has waited %d s for %s over MPI_COMM_WORLD: is libncclmpi loaded in every rank, "
                    "with the same NCCLMPI_* settings? (a rank without it never joins)", (int)nm_cfg.WARN_AFTER, what);
            warned = true;
        }
    }
}

int world_rank()
{
    int r = -1, init = 0, fin = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fin);
    if (init && !fin) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static CommState *lookup(MPI_Comm comm)
{
    {
        std::lock_guard<std::mutex> g(states_mu);
        if (comm_keyval == MPI_KEYVAL_INVALID)
            PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_delete_fn, &comm_keyval, nullptr);
    }
    void *val = nullptr;
    int found = 0;
    PMPI_Comm_get_attr(comm, comm_keyval, &val, &found);
    if (found) return static_cast<CommState *>(val);
    CommState *cs = new CommState;
    cs->comm = comm;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    cs->inter = inter != 0;
    PMPI_Comm_rank(comm, &cs->rank);
    PMPI_Comm_size(comm, &cs->size);
    cs->remote_size = cs->size;
    if (cs->inter) {
        PMPI_Comm_remote_size(comm, &cs->remote_size);
        cs->cap.store(NM_CAP_INTER);
    }
    std::lock_guard<std::mutex> g(states_mu);
    // another thread may have attached one meanwhile (MPI_THREAD_MULTIPLE)
    PMPI_Comm_get_attr(comm, comm_keyval, &val, &found);
    if (found) {
        delete cs;
        return static_cast<CommState *>(val);
    }
    cs->id = next_id++;
    PMPI_Comm_set_attr(comm, comm_keyval, cs);
    states.push_back(cs);
    return cs;
}

CommState *comm_state(MPI_Comm comm)
{
    uint64_t gen = __atomic_load_n(&comm_gen, __ATOMIC_ACQUIRE);
    if (comm_cache.comm == comm && comm_cache.gen == gen && comm_cache.cs) return comm_cache.cs;
    CommState *cs = lookup(comm);
    comm_cache.comm = comm;
    comm_cache.cs = cs;
    comm_cache.gen = gen;
    return cs;
}

std::string CommState::describe() const
{
    char b[96];
    snprintf(b, sizeof(b), "comm%d{rank %d/%d%s, %s}", id, rank, size, inter ? ", inter" : "", nm_cap_str(getcap()));
    return b;
}

// What each rank tells the others before any NCCL call.
struct Readiness {
    int ok;
    int nccl_version;
    CUuuid uuid;
    uint64_t nccl_host;  // nccl_host_id()
    char why[48];
    SideOffer side;  // the kept sides it could take over (side_cache.h)
};

// The host identity NCCL compares with the GPU to refuse two ranks on one GPU ("Duplicate GPU"):
// NCCL_HOSTID where set, else the host itself (hostname and boot id: the same for every rank that
// sees the same GPU). Ranks whose NCCL_HOSTID differ are on different hosts for NCCL, which then
// connects them through its network transport even on one GPU (how the test suite runs NCCL at
// several ranks on a one-GPU machine: doc/gpu-testing.md); ncclmpi takes them as NCCL does.
static uint64_t nccl_host_id()
{
    const char *h = nm_config_foreign("NCCL_HOSTID");
    if (!h) return 0;
    uint64_t x = 1469598103934665603ull;  // FNV-1a, never 0 for a set value: "set to empty" differs from unset
    for (; *h; h++) x = (x ^ (unsigned char)*h) * 1099511628211ull;
    return x | 1;
}

static void set_staged(CommState *cs, const char *fmt, int who, const char *detail)
{
    char b[192];
    if (who >= 0) snprintf(b, sizeof(b), fmt, who, detail);
    else snprintf(b, sizeof(b), "%s", detail);
    cs->why_staged = b;
    cs->cap.store(NM_CAP_STAGED, std::memory_order_release);
    if (cs->rank == 0) NM_INFO(INIT, "%s: staged path for device buffers: %s", cs->describe().c_str(), b);
}

static const char kNcclInitWait[] =
    "inside NCCL's initialization of the communicator (ncclCommInitRank), which every rank of it joins: a rank whose own "
    "initialization failed, or that is gone, leaves the others here";
static const char kNcclConnectWait[] =
    "inside NCCL's calls that connect the communicator's algorithms or peers at their first use, which every rank of it "
    "joins: a rank that is gone or not calling leaves the others here";
static const char kNcclSplitWait[] =
    "inside NCCL's split of the parent's NCCL communicator (ncclCommSplit, NCCLMPI_EAGER), which every rank of the "
    "parent joins: a rank whose own split failed, or that is gone, leaves the others here";
// What a rank whose own part failed tells, when its peers stay inside NCCL's wait for it
// (util/watchdog.h, NCCLMPI_CREATE_GRACE)
static const char kOwnInitFailed[] =
    "NCCL's initialization of the communicator (ncclCommInitRank) failed on this rank, and its peers may be inside "
    "theirs, waiting for it";
static const char kOwnSplitFailed[] =
    "NCCL's split of the parent's NCCL communicator (ncclCommSplit, NCCLMPI_EAGER) failed on this rank, and its peers "
    "may be inside theirs, waiting for it";

// The agreement after this rank's own part of a creation: marked, where that part failed, so that
// a peer left inside NCCL's wait for it ends the job after NCCLMPI_CREATE_GRACE (util/watchdog.h)
static nm_status_t agree_after(bool ok, int *all_ok, MPI_Comm comm, const std::string &desc, const char *what,
                               const char *own_failure, int comm_id, std::string *err)
{
    if (ok || nm_cfg.CREATE_GRACE <= 0) return agree_min(ok, all_ok, comm, desc, what, err);
    InnerFatalWait w("Comm_create", own_failure, comm_id, (double)nm_cfg.CREATE_GRACE);
    return agree_min(0, all_ok, comm, desc, what, err);
}

// NCCL's connections made now (NCCLMPI_CONNECT), inside the creation every rank of comm is in,
// after it agreed that all made the NCCL communicator: init: the algorithms NCCL picks for a
// ladder of sizes, and (on communicators of at most NCCLMPI_CONNECT_PEERS ranks) every peer's
// sends and receives; all: the peers only (NCCL connected every algorithm inside its
// initialization: nccl_api.cc). Every rank reads the same size and settings, so all connect alike
// or none does; false on every rank when one failed (connect() agrees on its buffer before any
// NCCL call and on each call before the next). doc/design.md, "Connected at creation".
static int connect_agreed(ProcessGroup *pg, MPI_Comm comm, bool algorithms, bool peers, bool ready = true)
{
    int ok = 0, all_ok = 0;
    {
        // (NCCL connects inside its calls, on the host, without a timeout: as kNcclInitWait)
        InnerFatalWait w("Comm_create", kNcclConnectWait, -1);
        ok = pg->connect(algorithms, peers, comm, ready) == NM_OK;
    }
    std::string err;
    if (agree_min(ok, &all_ok, comm, pg->describe(), "connecting its NCCL communicator", &err) != NM_OK) {
        pg->fail(err);
        return -1;
    }
    if (!all_ok) pg->fail("connecting the ranks failed on some rank");
    return all_ok != 0;
}

// 1: connected (or nothing to connect), 0: failed on some rank (agreed), -1: the agreement did not
// complete (pg failed with the reason)
static int connect_now(ProcessGroup *pg, MPI_Comm comm, int size)
{
    if (connect_mode() == CONNECT_LAZY || size < 2) return 1;
    return connect_agreed(pg, comm, connect_mode() != CONNECT_ALL, size <= nm_cfg.CONNECT_PEERS);
}

void comm_connect_peers(CommState *cs)
{
    ProcessGroup *pg = cs->pg.get();
    if (!pg || pg->peers_connected()) return;
    std::string err;  // every rank is here, each having had the real MPI progressed
    if (agree_barrier(cs->comm, cs->describe(), "connecting its NCCL sends and receives", &err) != NM_OK) {
        pg->fail(err);
        cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
        return;
    }
    // (its launches so far finish first: its NCCL work stays in issue order on one stream)
    const bool drained = !pg->last_stream || pg->last_stream == pg->stream() ||
                         cu.cuStreamSynchronize(pg->last_stream) == CUDA_SUCCESS;
    if (connect_agreed(pg, cs->comm, false, true, drained) != 1) cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
}

static const char kCreating[] = "creating its NCCL communicator";

// One of the creation's agreements failed or ran out (core/engine/deadline.h): cs is FAILED on
// this rank, what pg made is aborted, and every device call on cs fails with `why`.
static void creation_failed(CommState *cs, std::unique_ptr<ProcessGroup> pg, SideHeld *held, const std::string &why)
{
    if (held) side_settle(cs, held, 0);
    if (pg) {
        pg->fail(why);
        pg->destroy();
    }
    cs->why_failed = why;
    cs->cap.store(NM_CAP_FAILED, std::memory_order_release);
}

void comm_create(CommState *cs, int device)
{
    int cap = cs->getcap();
    if (cap != NM_CAP_UNKNOWN && cap != NM_CAP_PENDING) return;
    if (cap == NM_CAP_PENDING) __atomic_sub_fetch(&nm_pending_comms, 1, __ATOMIC_RELAXED);  // it leaves PENDING now
    if (device < 0) device = cs->pending_device;
    double t0 = nm_now_s();
    std::unique_ptr<ProcessGroup> pg(new ProcessGroup(cs->id, device, cs->rank, cs->size));
    Readiness mine;
    memset(&mine, 0, sizeof(mine));
    std::string why;
    CUdevice dev;
    mine.ok = pg->check(&why) && cu.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
              cu.cuDeviceGetUuid(&mine.uuid, dev) == CUDA_SUCCESS;
    if (!mine.ok && why.empty()) why = "no GPU identity";
    mine.nccl_version = nccl_loaded() ? nccl.version : 0;
    mine.nccl_host = nccl_host_id();
    snprintf(mine.why, sizeof(mine.why), "%s", why.c_str());
    SideHeld *held = side_offer(cs, device, &mine.side);
    std::vector<Readiness> all(cs->size);
    std::string err;
    if (agree_allgather(&mine, all.data(), sizeof(Readiness), cs->comm, cs->describe(), kCreating, &err) != NM_OK)
        return creation_failed(cs, std::move(pg), held, err);
    // From here every decision reads the table only, so every rank makes the same one.
    std::vector<SideOffer> offers(cs->size);
    for (int i = 0; i < cs->size; i++) offers[i] = all[i].side;
    int shares = -1, with = -1;  // the first rank that shares a GPU with an earlier one, as NCCL sees it
    const char *staged = nullptr;
    int who = -1;
    for (int i = 0; i < cs->size && !staged; i++) {
        if (!all[i].ok) staged = all[i].why, who = i;
        else if (all[i].nccl_version != all[0].nccl_version) staged = "another NCCL version than rank 0", who = i;
        for (int j = 0; j < i && shares < 0; j++)
            if (!memcmp(&all[i].uuid, &all[j].uuid, sizeof(CUuuid)) && all[i].nccl_host == all[j].nccl_host) shares = i, with = j;
    }
    if (staged) {
        side_settle(cs, held, 0);
        return set_staged(cs, "rank %d: %s", who, staged);
    }
    if (shares >= 0) {  // (every rank read the same table: every rank is here)
        char d[96];
        snprintf(d, sizeof(d), "shares its GPU with rank %d (NCCL needs one GPU per rank)", with);
        set_staged(cs, "rank %d %s", shares, d);
        const uint64_t id = side_common(offers.data(), cs->size, NM_SIDE_SHARED);
        if (side_settle(cs, held, id)) {
            NM_STAT_INC(nm_stats.sides_reused);
            NM_DEBUG(INIT, "%s: reuses the shared-GPU window %llx of a freed communicator", cs->describe().c_str(), (unsigned long long)id);
            return;
        }
        shared_setup(cs, device);  // collective: the GPU's own path for large collectives
        if (cs->shared) {
            cs->side_id = offers[0].fresh | NM_SIDE_SHARED, cs->side_device = device;
            NM_STAT_INC(nm_stats.sides_made);
        }
        return;
    }
    if (nm_cfg.COALESCE && cs->hidden == MPI_COMM_NULL) PMPI_Comm_dup(cs->comm, &cs->hidden);
    const uint64_t id = side_common(offers.data(), cs->size, NM_SIDE_NCCL);
    if (side_settle(cs, held, id)) {
        NM_STAT_INC(nm_stats.sides_reused);
        cs->cap.store(NM_CAP_READY, std::memory_order_release);
        NM_DEBUG(INIT, "%s: reuses the NCCL communicator %llx of a freed communicator", cs->describe().c_str(), (unsigned long long)id);
        return;
    }
    // A new NCCL communicator. Each rank makes its stream and flags first, and the ranks learn
    // together whether all did (with rank 0's id), so that no rank enters NCCL's collective init
    // alone. Its notice communicator (process_group.h, fail_tell) is made here, where every rank is.
    MPI_Comm notice = MPI_COMM_NULL;
    PMPI_Comm_dup(cs->comm, &notice);
    pg->set_notice(notice);
    struct Init {
        int ok;
        ncclUniqueId id;
    } init;
    memset(&init, 0, sizeof(init));
    init.ok = pg->open(&why) && (cs->rank != 0 || nccl.ncclGetUniqueId(&init.id) == ncclSuccess);
    std::vector<Init> inits(cs->size);
    if (agree_allgather(&init, inits.data(), sizeof(Init), cs->comm, cs->describe(), kCreating, &err) != NM_OK)
        return creation_failed(cs, std::move(pg), nullptr, err);
    for (int i = 0; i < cs->size; i++)
        if (!inits[i].ok) return set_staged(cs, "rank %d: %s", i, i == 0 ? "no NCCL unique id or stream" : "cannot create a CUDA stream");
    int ok = 0, all_ok = 0;
    {
        // NCCL's initialization waits for every rank without a timeout, and no notice reaches a
        // rank inside it: a rank whose own initialization failed before it joined leaves the others
        // here. With NCCLMPI_TIMEOUT the wait is fatal (util/watchdog.h): the job ends with an
        // error naming it instead of waiting for ever.
        InnerFatalWait w("Comm_create", kNcclInitWait, cs->id);
        ok = pg->init_with_id(inits[0].id) == NM_OK;
    }
    if (agree_after(ok, &all_ok, cs->comm, cs->describe(), kCreating, kOwnInitFailed, cs->id, &err) != NM_OK)
        return creation_failed(cs, std::move(pg), nullptr, err);
    if (!all_ok) {
        if (ok) pg->fail("NCCL initialization failed on another rank");
        pg->destroy();
        return set_staged(cs, "", -1, "ncclCommInitRank failed on some rank");
    }
    if (const int c = connect_now(pg.get(), cs->comm, cs->size); c != 1) {
        if (c < 0) {
            const std::string why = pg->fail_reason();
            return creation_failed(cs, std::move(pg), nullptr, why);
        }
        pg->destroy();
        return set_staged(cs, "", -1, "connecting the ranks failed on some rank");
    }
    oneshot_setup(pg.get(), cs->comm);  // collective: every rank is here
    cs->pg = std::move(pg);
    cs->side_id = offers[0].fresh | NM_SIDE_NCCL;
    cs->side_device = device;
    NM_STAT_INC(nm_stats.sides_made);
    cs->cap.store(NM_CAP_READY, std::memory_order_release);
    NM_DEBUG(INIT, "%s: NCCL communicator agreed and made in %.1f ms", cs->describe().c_str(), 1e3 * (nm_now_s() - t0));
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

// ncclCommSplit of a READY parent into the child (collective over the parent's ranks).
static bool eager_split(CommState *ps, MPI_Comm parent, MPI_Comm child)
{
    CommState *cs = child != MPI_COMM_NULL ? comm_state(child) : nullptr;
    int color = NCCL_SPLIT_NOCOLOR, key = 0;
    if (cs) {  // color: the parent rank of the child's rank 0 (same on every member)
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
    ProcessGroup *ppg = ps->pg.get();
    std::string why;
    if (cs && !cs->inter) pg.reset(new ProcessGroup(cs->id, ppg->device(), cs->rank, cs->size));
    if (pg) {  // (collective over the child: every rank of it is here)
        MPI_Comm notice = MPI_COMM_NULL;
        PMPI_Comm_dup(child, &notice);
        pg->set_notice(notice);
    }
    {
        InnerFatalWait w("Comm_split", kNcclSplitWait, ps->id);  // (as kNcclInitWait)
        if (pg && pg->prepare(&why)) {
            ok = pg->init_split(*ppg, color, key) == NM_OK;
        } else {  // not in the child, or not ready: still in the parent's collective split
            ncclComm_t none = nullptr;
            ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
            cfg.splitShare = 1;
            DeviceGuard dg(ppg->ctx());
            ok = nccl.ncclCommSplit(ppg->nccl_comm(), NCCL_SPLIT_NOCOLOR, 0, &none, &cfg) == ncclSuccess && !pg;
        }
    }
    std::string err;
    if (agree_after(ok, &all_ok, parent, ps->describe(), "splitting the NCCL communicator (NCCLMPI_EAGER)", kOwnSplitFailed,
                    ps->id, &err) != NM_OK)
        all_ok = 0;  // (the child's creation at its first use runs out the same way)
    if (!cs || cs->inter) return all_ok != 0;
    if (!all_ok) {
        if (pg) {
            if (ok) pg->fail("ncclCommSplit failed on another rank");
            pg->destroy();
        }
        return false;
    }
    if (connect_now(pg.get(), child, cs->size) != 1) {
        pg->destroy();
        return false;
    }
    oneshot_setup(pg.get(), child);  // collective over the child: each of its ranks is here
    NM_STAT_INC(nm_stats.sides_made);
    std::lock_guard<std::mutex> g(cs->mu);
    if (nm_cfg.COALESCE) PMPI_Comm_dup(child, &cs->hidden);
    cs->pg = std::move(pg);
    cs->split_of = ps->side_id;
    cs->split_seq = ++ps->splits;
    cs->cap.store(NM_CAP_READY, std::memory_order_release);
    return true;
}

void comm_state_created(MPI_Comm parent, MPI_Comm child)
{
    if (!nm_cfg.EAGER) return;
    CommState *ps = parent != MPI_COMM_NULL ? comm_state(parent) : nullptr;
    // every rank of the parent knows the parent's agreed state, so all split or none does
    if (ps && nm_cfg.SPLIT && ps->getcap() == NM_CAP_READY && nccl.ncclCommSplit && eager_split(ps, parent, child))
        return;
    if (child == MPI_COMM_NULL) return;
    CommState *cs = comm_state(child);
    if (cs->inter) return;
    int dev = eager_device(child);
    int have = dev >= 0, all_have = 0;  // every member must take part, also those without a device
    std::string err;
    if (agree_min(have, &all_have, child, cs->describe(), "checking that every rank has a device (NCCLMPI_EAGER)", &err) != NM_OK)
        return creation_failed(cs, nullptr, nullptr, err);
    if (!all_have) {
        NM_INFO(INIT, "NCCLMPI_EAGER: a rank has no current CUDA device; NCCL communicator made at first use");
        return;
    }
    std::lock_guard<std::mutex> g(cs->mu);
    comm_create(cs, dev);
}

// MPI_Finalize's order of destruction, the same on every rank for the communicators it shares:
// split children first (a child shares its parent's NCCL resources), newest split of a parent
// first; then by agreed side id, descending (not the order this process made them in, which
// differs between ranks). Communicators without an NCCL side go anywhere.
static bool destroyed_before(const CommState *a, const CommState *b)
{
    if ((a->split_of != 0) != (b->split_of != 0)) return a->split_of != 0;
    if (a->split_of != b->split_of) return a->split_of > b->split_of;
    if (a->split_seq != b->split_seq) return a->split_seq > b->split_seq;
    return a->side_id > b->side_id;
}

void comm_states_teardown()
{
    std::vector<CommState *> all;
    {
        std::lock_guard<std::mutex> g(states_mu);
        all = states;
    }
    std::stable_sort(all.begin(), all.end(), destroyed_before);
    for (CommState *cs : all) {
        std::lock_guard<std::mutex> g(cs->mu);
        if (cs->pg) NM_DEBUG(INIT, "MPI_Finalize destroys the NCCL side %llx (split of %llx, #%u)", (unsigned long long)cs->side_id,
                             (unsigned long long)cs->split_of, cs->split_seq);
        if (!cs->rounds.empty()) NM_DEBUG(INIT, "%s torn down with %zu agreement rounds in flight", cs->describe().c_str(), cs->rounds.size());
        if (cs->pg) cs->pg->destroy();
        cs->pg.reset();
        if (cs->getcap() == NM_CAP_READY || cs->getcap() == NM_CAP_FAILED) cs->cap.store(NM_CAP_UNKNOWN);
    }
    side_cache_teardown();  // after the live ones: a kept group may be a live split child's parent
}

void comm_states_drain_rounds()
{
    std::vector<CommState *> all;
    {
        std::lock_guard<std::mutex> g(states_mu);
        all = states;
    }
    for (CommState *cs : all)
        if (cs->hidden != MPI_COMM_NULL) engine_rounds_drain(cs);
}

}  // namespace ncclmpi
