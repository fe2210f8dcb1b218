// ncclmpi: the device sides of freed communicators, kept for reuse (side_cache.h).
#include "core/comm/side_cache.h"

#include <string.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/comm/comm_state.h"
#include "core/comm/process_group.h"
#include "core/engine/engine.h"
#include "core/tl/shared/shared_gpu.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

struct Side {
    uint64_t id = 0;
    std::vector<int> world;  // the processes, in the order of the communicator that made it
    int device = -1;
    std::unique_ptr<ProcessGroup> pg;
    SharedWin *shared = nullptr;
    uint64_t parked = 0;  // when it was kept (a count): the oldest goes first
};

struct SideHeld {
    std::vector<Side *> sides;
};

static std::mutex cache_mu;  // never held across an MPI call or a destruction
static std::vector<Side *> cache;
static uint64_t parks, made;
static bool closed;
// Sides to destroy once no NCCL operation of this process is in flight: a destroy frees device
// memory, which waits for the whole device, where another communicator's kernel may wait for a
// peer that waits for this rank's next MPI call (doc/design.md, "Kept for reuse").
static std::mutex graves_mu;
static std::vector<Side *> graves;
static std::atomic<int> ngraves{0};

static void destroy_now(Side *s)
{
    if (s->pg) s->pg->destroy();
    shared_release(s->shared);
    delete s;
}

// An order every rank shares for the sides it destroys together: by agreed id, descending (each
// side's id is the same on its ranks, so any two ranks destroy the sides they share in the same
// relative order)
static void agreed_order(std::vector<Side *> &v)
{
    std::sort(v.begin(), v.end(), [](const Side *a, const Side *b) { return a->id > b->id; });
}

static void destroy(Side *s)
{
    if (__atomic_load_n(&closed, __ATOMIC_ACQUIRE)) return destroy_now(s);  // (after MPI_Finalize's teardown)
    std::lock_guard<std::mutex> g(graves_mu);
    graves.push_back(s);
    ngraves.store((int)graves.size(), std::memory_order_release);
}

void side_graves_reap(bool finalize)
{
    if (!ngraves.load(std::memory_order_acquire) || (!finalize && engine_inflight() > 0)) return;
    std::vector<Side *> v;
    {
        std::unique_lock<std::mutex> g(graves_mu, std::try_to_lock);
        if (!g.owns_lock()) return;
        v.swap(graves);
        ngraves.store(0, std::memory_order_release);
    }
    agreed_order(v);
    for (Side *e : v) destroy_now(e);
}

// The world ranks of cs's processes in its order, computed once (empty where a process is outside
// MPI_COMM_WORLD: such a communicator's side is never kept).
static const std::vector<int> &side_key(CommState *cs)
{
    if (cs->world_known) return cs->world;
    cs->world_known = true;
    MPI_Group g, w;
    PMPI_Comm_group(cs->comm, &g);
    PMPI_Comm_group(MPI_COMM_WORLD, &w);
    std::vector<int> mine(cs->size), in_world(cs->size);
    for (int i = 0; i < cs->size; i++) mine[i] = i;
    PMPI_Group_translate_ranks(g, cs->size, mine.data(), w, in_world.data());
    PMPI_Group_free(&g);
    PMPI_Group_free(&w);
    for (int r : in_world)
        if (r == MPI_UNDEFINED) return cs->world;  // (a process of another world: never kept)
    cs->world = std::move(in_world);
    return cs->world;
}

SideHeld *side_offer(CommState *cs, int device, SideOffer *mine)
{
    memset(mine, 0, sizeof(*mine));
    {
        // unique in the job whatever any rank's setting: this process's world rank and count
        std::lock_guard<std::mutex> g(cache_mu);
        mine->fresh = ((uint64_t)(uint32_t)world_rank() << 32) | (++made << 1);
    }
    if (nm_cfg.COMM_CACHE <= 0) return nullptr;
    const std::vector<int> &key = side_key(cs);
    if (key.empty()) return nullptr;
    SideHeld *held = new SideHeld;
    {
        std::lock_guard<std::mutex> g(cache_mu);
        for (Side *s : cache)
            if (s->device == device && s->world == key) held->sides.push_back(s);
        std::sort(held->sides.begin(), held->sides.end(), [](const Side *a, const Side *b) { return a->id < b->id; });
        if (held->sides.size() > NM_SIDE_OFFER) held->sides.resize(NM_SIDE_OFFER);
        for (Side *s : held->sides) cache.erase(std::find(cache.begin(), cache.end(), s));
    }
    for (size_t i = 0; i < held->sides.size(); i++) mine->ids[i] = held->sides[i]->id;
    return held;
}

uint64_t side_common(const SideOffer *offers, int n, int kind)
{
    for (uint64_t id : offers[0].ids) {  // ascending: the first one every rank holds
        if (!id || (id & 1) != (uint64_t)kind) continue;
        bool everywhere = true;
        for (int q = 1; q < n && everywhere; q++)
            everywhere = std::find(std::begin(offers[q].ids), std::end(offers[q].ids), id) != std::end(offers[q].ids);
        if (everywhere) return id;
    }
    return 0;
}

bool side_settle(CommState *cs, SideHeld *held, uint64_t id)
{
    if (!held) return false;
    bool took = false;
    std::vector<Side *> back;
    for (Side *s : held->sides) {
        if (id && s->id == id) {
            cs->pg = std::move(s->pg);
            cs->shared = s->shared;
            cs->side_id = id;
            cs->side_device = s->device;
            if (cs->pg) cs->pg->adopt(cs->id);
            delete s;
            took = true;
        } else {
            back.push_back(s);
        }
    }
    delete held;
    if (!back.empty()) {
        std::lock_guard<std::mutex> g(cache_mu);
        cache.insert(cache.end(), back.begin(), back.end());
        std::sort(cache.begin(), cache.end(), [](const Side *a, const Side *b) { return a->parked < b->parked; });
    }
    return took;
}

void side_park(CommState *cs)
{
    if (!cs->pg && !cs->shared) return;
    Side *s = new Side;  // what the state holds: kept, or destroyed below
    s->pg = std::move(cs->pg);
    s->shared = cs->shared;
    cs->shared = nullptr;
    s->id = cs->side_id;
    s->device = cs->side_device;
    const bool healthy = s->pg ? cs->getcap() == NM_CAP_READY && !s->pg->failed() : true;
    std::vector<Side *> gone;
    if (!healthy || !s->id || cs->world.empty() || nm_cfg.COMM_CACHE <= 0) {
        gone.push_back(s);
    } else {
        s->world = cs->world;
        std::lock_guard<std::mutex> g(cache_mu);
        if (closed) {
            gone.push_back(s);
        } else {
            s->parked = ++parks;
            cache.push_back(s);
            while (cache.size() > (size_t)nm_cfg.COMM_CACHE) {  // the oldest kept one
                gone.push_back(cache.front());
                cache.erase(cache.begin());
            }
        }
    }
    for (Side *e : gone) destroy(e);
}

void side_cache_teardown()
{
    std::vector<Side *> all;
    {
        std::lock_guard<std::mutex> g(cache_mu);
        __atomic_store_n(&closed, true, __ATOMIC_RELEASE);
        all.swap(cache);
    }
    side_graves_reap(true);
    agreed_order(all);  // (not the order each rank kept them in: that is its own timing)
    for (Side *e : all) destroy_now(e);
}

}  // namespace ncclmpi
