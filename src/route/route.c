/* ncclmpi: the routing decision. Pure: reads only its input. The argument that every rank
 * decides the same is in route.h and doc/design.md; test/unit/test_route.c checks it. */
#include "route/route.h"
#include "route/nm_op.h"

const unsigned nm_opkind_facts[NM_OPK_COUNT] = {
#define NM_OPK_FACTS(K, name, facts) [NM_OPK_##K] = (facts),
    NM_OPK_TABLE(NM_OPK_FACTS)
#undef NM_OPK_FACTS
};

static nm_decision_t mk(ncclmpi_route_t r, nm_why_t w, unsigned act)
{
    nm_decision_t d = {r, w, act};
    return d;
}

int nm_route_nccl_capable(const nm_route_in_t *in)
{
    unsigned f = nm_opk(in->kind);
    if (!(f & NM_KF_NCCL)) return 0;
    if (f & NM_KF_RED) return in->nccl_op != NM_UNSUPPORTED && in->nccl_type != NM_UNSUPPORTED;
    return 1;
}

static nm_why_t incapable_why(const nm_route_in_t *in)
{
    if (!(nm_opk(in->kind) & NM_KF_NCCL)) return NM_WHY_KIND;
    return in->nccl_op == NM_UNSUPPORTED ? NM_WHY_OP : NM_WHY_TYPE;
}

/* NCCL communicator creation: only in a blocking collective (every rank of the communicator
 * is in it, in the same order), and only from shared facts. Not in a persistent collective's
 * init (MPI-4): it runs no data (its starts run the nonblocking form, NM_WHY_PERSISTENT_START). */
static unsigned create_act(const nm_route_in_t *in)
{
    if ((in->flags & (NM_OPF_NB | NM_OPF_PERS)) || in->force_staged) return 0;
    if (in->cap != NM_CAP_UNKNOWN && in->cap != NM_CAP_PENDING) return 0;
    if (in->agree) return in->vote == NM_VOTE_NCCL ? NM_ACT_CREATE : 0;
    if (in->cap == NM_CAP_PENDING) return NM_ACT_CREATE;
    /* the uniform-memory contract: a device rank of a kind where every rank has data knows
     * that every rank has device data */
    if (in->rank_kind == NM_RK_DEVICE && !(nm_opk(in->kind) & NM_KF_AMBIG) && nm_route_nccl_capable(in))
        return NM_ACT_CREATE;
    return 0;
}

/* Connecting every peer's sends and receives: in a blocking collective of a kind where every rank
 * has data and a body of sends and receives, on a READY communicator whose peers are cold, so
 * that every rank of it is in the call (and routes it alike) and NCCL's first sends and receives
 * never connect inside a nonblocking call. Shared facts only. */
static unsigned connect_act(const nm_route_in_t *in)
{
    const unsigned f = nm_opk(in->kind);
    if ((in->flags & (NM_OPF_NB | NM_OPF_PERS)) || in->force_staged || in->cap != NM_CAP_READY || !in->peers_cold) return 0;
    if (!(f & NM_KF_SENDRECV) || (f & NM_KF_AMBIG) || !nm_route_nccl_capable(in)) return 0;
    if (in->agree && in->vote != NM_VOTE_NCCL) return 0;
    return NM_ACT_CONNECT;
}

nm_decision_t nm_route(const nm_route_in_t *in)
{
    const unsigned f = nm_opk(in->kind);
    const int nb = (in->flags & NM_OPF_NB) != 0;
    if (in->disable) return mk(NCCLMPI_ROUTE_HOST, NM_WHY_DISABLED, 0);
    if (!(f & NM_KF_COLL)) {
        /* a persistent neighbourhood collective: every rank's starts run the nonblocking form
         * (as the v/w forms below) */
        if ((in->flags & NM_OPF_PERS) && nm_pers_coll_everywhere(in->kind) && !in->devices_differ)
            return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_PERSISTENT_START, 0);
        if (in->rank_kind != NM_RK_DEVICE)
            return mk(NCCLMPI_ROUTE_HOST, in->rank_kind == NM_RK_EMPTY ? NM_WHY_EMPTY : NM_WHY_HOST_BUFFERS, 0);
        if (in->devices_differ) return mk(NCCLMPI_ROUTE_ERROR, NM_WHY_DEVICES, 0);
        if (in->flags & NM_OPF_PERS) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_PERSISTENT, 0);
        return mk(NCCLMPI_ROUTE_STAGED, (f & NM_KF_NEIGH) ? NM_WHY_NEIGHBOR : NM_WHY_P2P, 0);
    }
    unsigned act = create_act(in) | connect_act(in);
    /* a persistent v/w collective: every rank's starts run the nonblocking form, whatever its
     * buffers (an empty or host rank's too: the real MPI matches a persistent collective only with
     * the same persistent collective, and the others' starts make nonblocking calls) */
    if ((in->flags & NM_OPF_PERS) && nm_pers_coll_everywhere(in->kind) && !in->devices_differ)
        return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_PERSISTENT_START, act);
    if (in->rank_kind == NM_RK_EMPTY) return mk(NCCLMPI_ROUTE_HOST, NM_WHY_EMPTY, act);
    if (in->rank_kind == NM_RK_HOST) return mk(NCCLMPI_ROUTE_HOST, NM_WHY_HOST_BUFFERS, act);
    if (in->devices_differ) return mk(NCCLMPI_ROUTE_ERROR, NM_WHY_DEVICES, act);
    /* (a device rank of a persistent collective: every rank has data, all start the same
     * nonblocking form; the init itself neither creates nor connects) */
    if (in->flags & NM_OPF_PERS) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_PERSISTENT_START, act);
    if (in->force_staged) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_FORCED, act);
    /* another thread's NCCL work on some rank: nothing made now, every rank staged */
    if (in->busy && in->cap != NM_CAP_FAILED) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_THREADS, 0);
    /* a window exists only on a READY communicator; NCCLMPI_AGREE keeps its vote's routes */
    if (in->oneshot && in->cap == NM_CAP_READY && !in->agree) return mk(NCCLMPI_ROUTE_ONESHOT, NM_WHY_ONESHOT, act);
    if (!nm_route_nccl_capable(in)) return mk(NCCLMPI_ROUTE_STAGED, incapable_why(in), act);
    switch (in->cap) {
    case NM_CAP_INTER: return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_INTER, act);
    case NM_CAP_FAILED: return mk(NCCLMPI_ROUTE_ERROR, NM_WHY_FAILED, act);
    case NM_CAP_STAGED: return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_COMM, act);
    default: break;
    }
    if (in->agree) {
        if (nb) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_AGREE_NB, act);
        if (in->vote != NM_VOTE_NCCL) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_MIXED, act);
    }
    const unsigned carrier = (f & NM_KF_AMBIG) ? NM_ACT_CARRIER : 0;
    /* sends and receives not connected: only a blocking call that connects them first may use
     * NCCL (routed again after); the others are staged, whose real-MPI call every rank makes */
    if (in->cap == NM_CAP_READY && in->peers_cold && (f & NM_KF_SENDRECV) && !(act & NM_ACT_CONNECT))
        return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_PEERS, act);
    if (in->cap == NM_CAP_READY || (act & NM_ACT_CREATE))  /* after a creation: routed again */
        return mk(NCCLMPI_ROUTE_NCCL, NM_WHY_NCCL, act | carrier);
    /* no NCCL communicator, and this call cannot make one: the staged path, whose real-MPI
     * call matches what every other rank calls */
    unsigned pend = nb && in->cap == NM_CAP_UNKNOWN && !(f & NM_KF_AMBIG) ? NM_ACT_PENDING : 0;
    return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_NOT_YET, act | pend);
}

int nm_pers_coll_restarts(int kind)
{
    const unsigned f = nm_opk(kind);
    return ((f & NM_KF_COLL) && kind != NM_OPK_BARRIER) || (f & NM_KF_NEIGH);
}

int nm_pers_coll_everywhere(int kind)
{
    const unsigned f = nm_opk(kind);
    return nm_pers_coll_restarts(kind) && (f & (NM_KF_AMBIG | NM_KF_NEIGH));
}

int nm_route_vote(const nm_route_in_t *in)
{
    if (in->rank_kind == NM_RK_EMPTY) return NM_VOTE_ANY;
    if (in->rank_kind == NM_RK_HOST || in->devices_differ || in->force_staged || in->disable) return NM_VOTE_STAGE;
    if (!nm_route_nccl_capable(in)) return NM_VOTE_STAGE;
    if (in->cap == NM_CAP_INTER || in->cap == NM_CAP_STAGED || in->cap == NM_CAP_FAILED) return NM_VOTE_STAGE;
    return NM_VOTE_NCCL;
}

const char *nm_why_str(nm_why_t why)
{
    static const char *const s[NM_WHY_COUNT_] = {
        [NM_WHY_HOST_BUFFERS] = "host buffers",
        [NM_WHY_DISABLED] = "NCCLMPI_DISABLE=1",
        [NM_WHY_NCCL] = "NCCL",
        [NM_WHY_FORCED] = "NCCLMPI_FORCE_STAGED=1",
        [NM_WHY_THREADS] = "another thread's NCCL work (NCCLMPI_RENDEZVOUS)",
        [NM_WHY_OP] = "op not in NCCL",
        [NM_WHY_TYPE] = "datatype not in NCCL for reductions",
        [NM_WHY_EMPTY] = "no data on this rank",
        [NM_WHY_COMM] = "communicator cannot use NCCL",
        [NM_WHY_MIXED] = "NCCLMPI_AGREE: some rank passed host buffers",
        [NM_WHY_KIND] = "operation has no NCCL path",
        [NM_WHY_P2P] = "point-to-point on device buffers is staged",
        [NM_WHY_PERSISTENT] = "persistent point-to-point on device buffers is staged",
        [NM_WHY_DEVICES] = "buffers on different devices",
        [NM_WHY_INTER] = "intercommunicator",
        [NM_WHY_NOT_YET] = "no NCCL communicator yet (made at the next blocking collective on it)",
        [NM_WHY_FAILED] = "the communicator's NCCL operations failed earlier",
        [NM_WHY_AGREE_NB] = "NCCLMPI_AGREE: nonblocking collectives are staged",
        [NM_WHY_ONESHOT] = "small reduction: one-shot kernel",
        [NM_WHY_NEIGHBOR] = "neighbourhood collective on device buffers is staged",
        [NM_WHY_PERSISTENT_START] = "persistent collective: each start runs its nonblocking form",
        [NM_WHY_PEERS] = "sends and receives not connected yet (at the next blocking alltoall, gather or scatter)",
    };
    return (why >= 0 && why < NM_WHY_COUNT_ && s[why]) ? s[why] : "?";
}

const char *nm_route_str(ncclmpi_route_t r)
{
    switch (r) {
    case NCCLMPI_ROUTE_HOST: return "host";
    case NCCLMPI_ROUTE_NCCL: return "nccl";
    case NCCLMPI_ROUTE_STAGED: return "staged";
    case NCCLMPI_ROUTE_ERROR: return "error";
    case NCCLMPI_ROUTE_ONESHOT: return "oneshot";
    default: return "?";
    }
}

const char *nm_cap_str(int cap)
{
    static const char *const s[NM_CAP_COUNT_] = {"unknown", "pending", "ready", "staged", "failed", "inter"};
    return cap >= 0 && cap < NM_CAP_COUNT_ ? s[cap] : "?";
}

const char *nm_opkind_name(int kind)
{
    static const char *const s[NM_OPK_COUNT] = {
#define NM_OPK_NAME(K, name, facts) [NM_OPK_##K] = #name,
        NM_OPK_TABLE(NM_OPK_NAME)
#undef NM_OPK_NAME
    };
    return (kind >= 0 && kind < NM_OPK_COUNT && s[kind]) ? s[kind] : "?";
}

unsigned long long nm_hash_str(const char *s)
{
    unsigned long long h = 1469598103934665603ull;
    for (const char *c = s; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
}

void nm_same_put(long long slot[2], unsigned long long h)
{
    slot[0] = (long long)(h >> 1);
    slot[1] = -slot[0];
}

int nm_same_everywhere(const long long mine[2], const long long max[2]) { return max[0] == mine[0] && max[1] == mine[1]; }

void nm_env_vote_mine(long long mine[NM_ENV_VOTE_N], unsigned long long host_hash, unsigned long long gpus_hash,
                      int gpu_node, int autom)
{
    nm_same_put(mine, host_hash);
    nm_same_put(mine + 2, gpus_hash);
    mine[4] = -(long long)(!autom || gpu_node);
}

const char *nm_env_vote_off(const long long mine[NM_ENV_VOTE_N], const long long all[NM_ENV_VOTE_N], int autom)
{
    if (!nm_same_everywhere(mine, all)) return "ranks on several nodes";
    if (all[4] != -1) return "a rank on a machine without NVIDIA GPUs";
    if (autom && !nm_same_everywhere(mine + 2, all + 2)) return "ranks with different CUDA_VISIBLE_DEVICES";
    return NULL;
}

nm_p2p_limits_t nm_p2p_limits(int ranks, int gpus, int mps, size_t min_cfg, int min_set, size_t batch_cfg, int batch_set)
{
    nm_p2p_limits_t l = {min_cfg, batch_cfg, 1};
    if (gpus <= 0 || ranks <= gpus || mps) return l;
    l.ranks_per_gpu = (ranks + gpus - 1) / gpus;
    const size_t shared_min = (size_t)l.ranks_per_gpu * NM_P2P_SHARED_MIN_PER_RANK;
    if (!min_set && shared_min > l.envelope_min) l.envelope_min = shared_min;
    if (!batch_set) l.copy_batch = 0;
    return l;
}
