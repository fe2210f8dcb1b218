// ncclmpi: neighbourhood collectives as point-to-point (see neighbor.h).
#include "core/tl/p2p/neighbor.h"

#include <string>
#include <vector>

#include "core/comm/comm_state.h"
#include "core/engine/task.h"
#include "core/tl/p2p/envelope.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

struct Neighbors {
    MPI_Comm dup = MPI_COMM_NULL;  // where the messages travel
    std::vector<int> src, dst;     // by block: where block i comes from, where block j goes
    std::vector<int> rtag, stag;   // and the tags they travel with
};

static bool on() { return env_device() && !nm_cfg.FORCE_STAGED; }

void neigh_comm_created(MPI_Comm comm)
{
    if (!on() || comm == MPI_COMM_NULL) return;
    int inter = 0, topo = MPI_UNDEFINED;
    PMPI_Comm_test_inter(comm, &inter);
    if (!inter) PMPI_Topo_test(comm, &topo);
    if (topo == MPI_UNDEFINED) return;
    Neighbors *n = new Neighbors;
    if (topo == MPI_CART) {
        // dimension d: block 2d toward -1, 2d + 1 toward +1; what comes from -1 was sent toward +1
        int nd = 0;
        PMPI_Cartdim_get(comm, &nd);
        for (int d = 0; d < nd; d++) {
            int minus = MPI_PROC_NULL, plus = MPI_PROC_NULL;
            PMPI_Cart_shift(comm, d, 1, &minus, &plus);
            n->src.insert(n->src.end(), {minus, plus});
            n->dst.insert(n->dst.end(), {minus, plus});
            n->stag.insert(n->stag.end(), {2 * d, 2 * d + 1});
            n->rtag.insert(n->rtag.end(), {2 * d + 1, 2 * d});
        }
    } else if (topo == MPI_GRAPH) {
        int rank = 0, k = 0;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Graph_neighbors_count(comm, rank, &k);
        n->src.resize(k);
        if (k) PMPI_Graph_neighbors(comm, rank, k, n->src.data());
        n->dst = n->src;
    } else {  // MPI_DIST_GRAPH
        int in = 0, out = 0, weighted = 0;
        PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted);
        n->src.resize(in);
        n->dst.resize(out);
        std::vector<int> sw(in + 1), dw(out + 1);
        PMPI_Dist_graph_neighbors(comm, in, n->src.data(), sw.data(), out, n->dst.data(), dw.data());
    }
    // graphs: one tag, blocks paired by their order (repeated edges too)
    n->rtag.resize(n->src.size(), 0);
    n->stag.resize(n->dst.size(), 0);
    // every rank of comm is in its constructor: the duplicate is collective there
    PMPI_Comm_dup(comm, &n->dup);
    PMPI_Comm_set_errhandler(n->dup, MPI_ERRORS_RETURN);  // failures are raised on comm
    CommState *cs = comm_state(comm);
    cs->neigh = n;
}

void neigh_degrees(MPI_Comm comm, int *in, int *out)
{
    int topo = MPI_UNDEFINED, weighted = 0;
    *in = *out = 0;
    PMPI_Topo_test(comm, &topo);
    if (topo == MPI_CART) {
        int nd = 0;
        PMPI_Cartdim_get(comm, &nd);
        *in = *out = 2 * nd;
    } else if (topo == MPI_GRAPH) {
        int rank = 0;
        PMPI_Comm_rank(comm, &rank);
        PMPI_Graph_neighbors_count(comm, rank, in);
        *out = *in;
    } else if (topo == MPI_DIST_GRAPH) {
        PMPI_Dist_graph_neighbors_count(comm, in, out, &weighted);
    }
}

void neigh_comm_freed(CommState *cs)
{
    Neighbors *n = cs->neigh;
    if (!n) return;
    cs->neigh = nullptr;
    env_flush_sends();  // (queued sends name the duplicate)
    PMPI_Comm_free(&n->dup);
    delete n;
}

bool neigh_applies(MPI_Comm comm)
{
    return on() && comm != MPI_COMM_NULL && comm_state(comm)->neigh != nullptr;
}

namespace {

MPI_Aint extent_of(MPI_Datatype t)
{
    MPI_Aint lb = 0, ext = 0;
    if (t != MPI_DATATYPE_NULL) PMPI_Type_get_extent(t, &lb, &ext);
    return ext;
}

// One message of the call, run as the application's own nonblocking call would be.
int post(int fn, int kind, void *buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm, MPI_Request *req)
{
    nm_op_t x;
    nm_op_init(&x, fn, kind, NM_OPF_NB | NM_OPF_TASK);
    if (kind == NM_OPK_RECV) {
        x.rbuf = buf;
        x.rcount = count;
        x.rtype = type;
    } else {
        x.sbuf = buf;
        x.scount = count;
        x.stype = type;
    }
    x.peer = x.rpeer = peer;
    x.tag = x.rtag = tag;
    x.comm = comm;
    x.req = req;
    int rc = MPI_SUCCESS;
    if (!nm_enter(&x, &rc)) rc = nm_real_fns[fn](&x);
    return rc;
}

}  // namespace

namespace {

// Block i of o's receive buffer (send: of its send buffer; every block of an allgather is the
// whole send buffer), ext the extent of the type of the fixed-count and v forms.
struct Block {
    char *buf;
    int count;
    MPI_Datatype type;
};
Block block_of(const nm_op_t *o, bool send, size_t i, MPI_Aint ext)
{
    const int k = o->kind;
    char *base = (char *)(send ? o->sbuf : o->rbuf);
    const int count = send ? o->scount : o->rcount;
    const MPI_Datatype type = send ? o->stype : o->rtype;
    if (send && (k == NM_OPK_NEIGHBOR_ALLGATHER || k == NM_OPK_NEIGHBOR_ALLGATHERV)) return {base, count, type};
    const int *counts = send ? o->scounts : o->rcounts;
    if (k == NM_OPK_NEIGHBOR_ALLTOALLW)
        return {base + (send ? o->sadispls : o->radispls)[i], counts[i], (send ? o->stypes : o->rtypes)[i]};
    if (k == NM_OPK_NEIGHBOR_ALLGATHERV || k == NM_OPK_NEIGHBOR_ALLTOALLV)
        return {base + (MPI_Aint)(send ? o->sdispls : o->rdispls)[i] * ext, counts[i], type};
    return {base + (MPI_Aint)i * count * ext, count, type};
}

}  // namespace

int neigh_run(nm_op_t *o)
{
    const Neighbors &n = *comm_state(o->comm)->neigh;
    const bool w = o->kind == NM_OPK_NEIGHBOR_ALLTOALLW;
    const MPI_Aint sext = w ? 0 : extent_of(o->stype), rext = w ? 0 : extent_of(o->rtype);
    std::vector<MPI_Request> reqs;
    reqs.reserve(n.src.size() + n.dst.size());
    int rc = MPI_SUCCESS;
    // the receives, then the sends (a block of MPI_PROC_NULL is left alone)
    for (size_t i = 0; i < n.src.size() && rc == MPI_SUCCESS; i++) {
        if (n.src[i] == MPI_PROC_NULL) continue;
        const Block b = block_of(o, false, i, rext);
        reqs.push_back(MPI_REQUEST_NULL);
        rc = post(NM_FN_Irecv, NM_OPK_RECV, b.buf, b.count, b.type, n.src[i], n.rtag[i], n.dup, &reqs.back());
    }
    for (size_t j = 0; j < n.dst.size() && rc == MPI_SUCCESS; j++) {
        if (n.dst[j] == MPI_PROC_NULL) continue;
        const Block b = block_of(o, true, j, sext);
        reqs.push_back(MPI_REQUEST_NULL);
        rc = post(NM_FN_Isend, NM_OPK_SEND, b.buf, b.count, b.type, n.dst[j], n.stag[j], n.dup, &reqs.back());
    }
    if (o->flags & NM_OPF_NB) {  // a task completes it once every message did
        Task *t = Task::get(o);
        t->set_group(std::move(reqs), rc);
        return t->publish(o->req);
    }
    const int e = own_requests_wait((int)reqs.size(), reqs.data(), nm_fn_names[o->fn]);
    if (rc == MPI_SUCCESS) rc = e;
    if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(o->comm, rc);
    return rc;
}

}  // namespace ncclmpi

// whether comm's neighbourhood collectives run as point-to-point (tests look it up with dlsym)
extern "C" __attribute__((visibility("default"))) int ncclmpi_test_neighbor_p2p(MPI_Comm comm)
{
    return ncclmpi::neigh_applies(comm) ? 1 : 0;
}
