// ncclmpi: significant buffers per operation kind, one function per kind (the op table's
// `buffers` column), and the per-call context they read.
#include "core/dtype/buffers.h"

#include "core/comm/comm_state.h"
#include "core/op_table.h"
#include "interpose/interpose.h"

// The in- and out-degree of comm's topology (Cartesian: two per dimension, a missing neighbour
// included as MPI_PROC_NULL); 0 without a topology (the real MPI reports the error).
extern "C" int nm_neighbor_degrees(MPI_Comm comm, int *nin, int *nout)
{
    int topo = MPI_UNDEFINED, weighted = 0;
    if (comm == MPI_COMM_NULL || PMPI_Topo_test(comm, &topo) != MPI_SUCCESS) return 0;
    switch (topo) {
    case MPI_CART: {
        int nd = 0;
        if (PMPI_Cartdim_get(comm, &nd) != MPI_SUCCESS) return 0;
        *nin = *nout = 2 * nd;
        return 1;
    }
    case MPI_GRAPH: {
        int r = 0;
        if (PMPI_Comm_rank(comm, &r) != MPI_SUCCESS || PMPI_Graph_neighbors_count(comm, r, nin) != MPI_SUCCESS) return 0;
        *nout = *nin;
        return 1;
    }
    case MPI_DIST_GRAPH: return PMPI_Dist_graph_neighbors_count(comm, nin, nout, &weighted) == MPI_SUCCESS;
    default: return 0;
    }
}

namespace ncclmpi {

namespace {

// A byte span [lo, hi) relative to a buffer pointer. An element type that cannot be decoded, or
// a negative count, makes the call invalid.
struct Builder {
    BufRef *out;
    int n = 0;
    bool bad = false;

    BufRef &next(bool is_recv, const void *ptr, int dir, bool dense)
    {
        BufRef &b = out[n++];
        b = BufRef{is_recv, const_cast<void *>(ptr), dir, 0, 0, dense, NM_MEM_HOST, -1};
        return b;
    }
    // count elements of dt at ptr
    void add(bool is_recv, const void *ptr, int dir, MPI_Datatype dt, long long count, bool whole = true)
    {
        const DtypeInfo *d = dtype_info(dt);
        if (count < 0 || !d) { bad = true; return; }
        BufRef &b = next(is_recv, ptr, dir, whole && d->contig);
        dtype_span(d, 0, count, &b.lo, &b.hi);
    }
    // per-rank counts and displacements: in extents of one type (types == nullptr), or in bytes
    // with a type per rank (alltoallw)
    void addv(bool is_recv, const void *ptr, int dir, MPI_Datatype dt, const MPI_Datatype *types, const int *counts,
              const int *displs, int nr)
    {
        if (!counts || !displs || (!types && !dtype_info(dt))) { bad = true; return; }
        BufRef &b = next(is_recv, ptr, dir, false);
        bool any = false;
        for (int i = 0; i < nr; i++) {
            if (counts[i] < 0) { bad = true; return; }
            if (counts[i] == 0) continue;
            const DtypeInfo *d = dtype_info(types ? types[i] : dt);
            if (!d) { bad = true; return; }
            MPI_Aint lo, hi;
            dtype_span(d, types ? (MPI_Aint)displs[i] : (MPI_Aint)displs[i] * d->extent, counts[i], &lo, &hi);
            if (hi <= lo) continue;
            if (!any || lo < b.lo) b.lo = lo;
            if (!any || hi > b.hi) b.hi = hi;
            any = true;
        }
    }
    // a type and a byte displacement per block (neighbourhood alltoallw)
    void addw(bool is_recv, const void *ptr, int dir, const MPI_Datatype *types, const int *counts,
              const MPI_Aint *displs, int nr)
    {
        if (!counts || !displs || !types) { bad = true; return; }
        BufRef &b = next(is_recv, ptr, dir, false);
        bool any = false;
        for (int i = 0; i < nr; i++) {
            if (counts[i] < 0) { bad = true; return; }
            if (counts[i] == 0) continue;
            const DtypeInfo *d = dtype_info(types[i]);
            if (!d) { bad = true; return; }
            MPI_Aint lo, hi;
            dtype_span(d, displs[i], counts[i], &lo, &hi);
            if (hi <= lo) continue;
            if (!any || lo < b.lo) b.lo = lo;
            if (!any || hi > b.hi) b.hi = hi;
            any = true;
        }
    }
    int done() const { return bad ? -1 : n; }
};

// receive buffer direction when the send buffer is MPI_IN_PLACE
int ios(const OpCtx &c) { return c.inplace ? BUF_INOUT : BUF_OUT; }


}  // namespace

int buffers_none(const OpCtx &, BufRef *) { return 0; }

int buffers_allreduce(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.inplace) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    b.add(true, c.o->rbuf, ios(c), c.o->rtype, c.o->rcount);
    return b.done();
}

int buffers_scan(const OpCtx &c, BufRef *out) { return buffers_allreduce(c, out); }

int buffers_exscan(const OpCtx &c, BufRef *out)  // rank 0's result is undefined: keep its contents
{
    Builder b{out};
    if (!c.inplace) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, c.o->rcount);
    return b.done();
}

int buffers_reduce(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root) {  // an intercommunicator's root only receives
        if (!c.inplace && !c.inter) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
        b.add(true, c.o->rbuf, ios(c), c.o->rtype, c.o->rcount);
    } else if (c.leaf) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    }
    return b.done();
}

int buffers_bcast(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root || c.leaf) b.add(true, c.o->rbuf, c.root ? BUF_IN : BUF_OUT, c.o->rtype, c.o->rcount);
    return b.done();
}

int buffers_allgather(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.inplace) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    b.add(true, c.o->rbuf, ios(c), c.o->rtype, (long long)c.o->rcount * c.n);
    return b.done();
}

int buffers_allgatherv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.inplace) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    b.addv(true, c.o->rbuf, BUF_INOUT, c.o->rtype, nullptr, c.o->rcounts, c.o->rdispls, c.n);
    return b.done();
}

int buffers_alltoall(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.inplace) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, (long long)c.o->scount * c.n);
    b.add(true, c.o->rbuf, ios(c), c.o->rtype, (long long)c.o->rcount * c.n);
    return b.done();
}

int buffers_alltoallv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.inplace) b.addv(false, c.o->sbuf, BUF_IN, c.o->stype, nullptr, c.o->scounts, c.o->sdispls, c.n);
    b.addv(true, c.o->rbuf, BUF_INOUT, c.o->rtype, nullptr, c.o->rcounts, c.o->rdispls, c.n);
    return b.done();
}

int buffers_alltoallw(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.o->rtypes || (!c.inplace && !c.o->stypes)) return -1;
    if (!c.inplace) b.addv(false, c.o->sbuf, BUF_IN, MPI_DATATYPE_NULL, c.o->stypes, c.o->scounts, c.o->sdispls, c.n);
    b.addv(true, c.o->rbuf, BUF_INOUT, MPI_DATATYPE_NULL, c.o->rtypes, c.o->rcounts, c.o->rdispls, c.n);
    return b.done();
}

// Reduce_scatter: every rank of the (local) group gives sum(rcounts) elements; it receives
// rcounts[rank]. For an intercommunicator the group is the local one (MPI-3.1 5.10.1).
int buffers_reduce_scatter(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (!c.o->rcounts) return -1;
    long long total = 0;
    for (int i = 0; i < c.size; i++) {
        if (c.o->rcounts[i] < 0) return -1;
        total += c.o->rcounts[i];
    }
    if (!c.inplace) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, total);
        b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcounts[c.rank]);
    } else {
        b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, total);
    }
    return b.done();
}

int buffers_reduce_scatter_block(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    long long total = (long long)c.o->rcount * c.size;
    if (!c.inplace) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, total);
        b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    } else {
        b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, total);
    }
    return b.done();
}

int buffers_gather(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root) {
        if (!c.inplace && !c.inter) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
        b.add(true, c.o->rbuf, ios(c), c.o->rtype, (long long)c.o->rcount * c.n);
    } else if (c.leaf) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    }
    return b.done();
}

int buffers_gatherv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root) {
        if (!c.inplace && !c.inter) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
        b.addv(true, c.o->rbuf, BUF_INOUT, c.o->rtype, nullptr, c.o->rcounts, c.o->rdispls, c.n);
    } else if (c.leaf) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    }
    return b.done();
}

int buffers_scatter(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root) {
        b.add(false, c.o->sbuf, BUF_IN, c.o->stype, (long long)c.o->scount * c.n);
        if (c.o->rbuf != MPI_IN_PLACE && !c.inter) b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    } else if (c.leaf) {
        b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    }
    return b.done();
}

int buffers_scatterv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.root) {
        b.addv(false, c.o->sbuf, BUF_IN, c.o->stype, nullptr, c.o->scounts, c.o->sdispls, c.n);
        if (c.o->rbuf != MPI_IN_PLACE && !c.inter) b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    } else if (c.leaf) {
        b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    }
    return b.done();
}

int buffers_barrier(const OpCtx &, BufRef *) { return 0; }

int buffers_send(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.o->peer != MPI_PROC_NULL) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    return b.done();
}

// A point-to-point receive: a message shorter than the buffer leaves the rest untouched. A
// contiguous buffer gets back only the bytes the status counts (no copy in); a non-contiguous one
// is copied in whole and back whole (its gaps keep their contents).
int buffers_recv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.o->rpeer != MPI_PROC_NULL) b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    return b.done();
}

int buffers_mrecv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.o->msg && *c.o->msg != MPI_MESSAGE_NO_PROC && *c.o->msg != MPI_MESSAGE_NULL)
        b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);
    return b.done();
}

int buffers_sendrecv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.o->peer != MPI_PROC_NULL) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    if (c.o->rpeer != MPI_PROC_NULL) b.add(true, c.o->rbuf, BUF_OUT, c.o->rtype, c.o->rcount);  // as buffers_recv
    return b.done();
}

// Neighbourhood collectives: a block per neighbour, nout sent, nin received (MPI-3.1 7.6). The
// block of a missing Cartesian neighbour (MPI_PROC_NULL) is left as it was: receive buffers are
// copied in and back whole.
int buffers_neighbor_allgather(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.nout > 0) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, (long long)c.o->rcount * c.nin);
    return b.done();
}

int buffers_neighbor_allgatherv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.nout > 0) b.add(false, c.o->sbuf, BUF_IN, c.o->stype, c.o->scount);
    if (c.nin > 0) b.addv(true, c.o->rbuf, BUF_INOUT, c.o->rtype, nullptr, c.o->rcounts, c.o->rdispls, c.nin);
    return b.done();
}

int buffers_neighbor_alltoall(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    b.add(false, c.o->sbuf, BUF_IN, c.o->stype, (long long)c.o->scount * c.nout);
    b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, (long long)c.o->rcount * c.nin);
    return b.done();
}

int buffers_neighbor_alltoallv(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.nout > 0) b.addv(false, c.o->sbuf, BUF_IN, c.o->stype, nullptr, c.o->scounts, c.o->sdispls, c.nout);
    if (c.nin > 0) b.addv(true, c.o->rbuf, BUF_INOUT, c.o->rtype, nullptr, c.o->rcounts, c.o->rdispls, c.nin);
    return b.done();
}

int buffers_neighbor_alltoallw(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.nout > 0) b.addw(false, c.o->sbuf, BUF_IN, c.o->stypes, c.o->scounts, c.o->sadispls, c.nout);
    if (c.nin > 0) b.addw(true, c.o->rbuf, BUF_INOUT, c.o->rtypes, c.o->rcounts, c.o->radispls, c.nin);
    return b.done();
}

int buffers_sendrecv_replace(const OpCtx &c, BufRef *out)
{
    Builder b{out};
    if (c.o->peer != MPI_PROC_NULL || c.o->rpeer != MPI_PROC_NULL)
        b.add(true, c.o->rbuf, BUF_INOUT, c.o->rtype, c.o->rcount, false);
    return b.done();
}

// Kinds that carry no buffer
#define NM_NO_BUFFERS(name) \
    int buffers_##name(const OpCtx &c, BufRef *out) { return buffers_none(c, out); }
NM_NO_BUFFERS(probe) NM_NO_BUFFERS(start) NM_NO_BUFFERS(wait) NM_NO_BUFFERS(waitall) NM_NO_BUFFERS(waitany)
NM_NO_BUFFERS(waitsome) NM_NO_BUFFERS(test) NM_NO_BUFFERS(request) NM_NO_BUFFERS(comm) NM_NO_BUFFERS(sync)
#undef NM_NO_BUFFERS

bool op_ctx_init(const nm_op_t *o, const CommState *cs, OpCtx *c)
{
    *c = OpCtx();
    c->o = o;
    c->cs = cs;
    c->inplace = o->sbuf == MPI_IN_PLACE;
    if (cs) {
        c->rank = cs->rank;
        c->size = cs->size;
        c->inter = cs->inter;
        c->n = cs->inter ? cs->remote_size : cs->size;
    }
    const unsigned f = nm_opk(o->kind);
    if ((f & NM_KF_NEIGH) && !nm_neighbor_degrees(o->comm, &c->nin, &c->nout)) return false;
    if (f & NM_KF_ROOTED) {
        if (c->inter) {
            c->root = o->root == MPI_ROOT;
            c->leaf = o->root >= 0;
        } else {
            if (o->root < 0 || o->root >= c->size) return false;
            c->root = o->root == c->rank;
            c->leaf = !c->root;
        }
    }
    // datatypes significant on this rank (the others may be garbage or MPI_DATATYPE_NULL)
    bool s_used = !c->inplace && o->stype != MPI_DATATYPE_NULL, r_used = o->rtype != MPI_DATATYPE_NULL;
    switch (o->kind) {
    case NM_OPK_SCATTER:
    case NM_OPK_SCATTERV:
        s_used = c->root;
        r_used = r_used && o->rbuf != MPI_IN_PLACE && !(c->inter && c->root);
        break;
    case NM_OPK_GATHER:
    case NM_OPK_GATHERV:
        r_used = c->root;
        s_used = s_used && !(c->inter && c->root);
        break;
    case NM_OPK_REDUCE:
        r_used = r_used && c->root;
        break;
    default:
        break;
    }
    c->sd = s_used ? dtype_info(o->stype) : nullptr;
    c->rd = r_used ? dtype_info(o->rtype) : nullptr;
    return true;
}

}  // namespace ncclmpi
