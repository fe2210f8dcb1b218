// ncclmpi: significance and spans of buffers, per operation kind (MPI-3.1 chapters 3 and 5).
#include "core/dtype/buffers.h"

#include "core/comm/comm_state.h"

namespace ncclmpi {

namespace {

struct Builder {
    BufRef *out;
    int n = 0;
    bool bad = false;

    // count elements of dt at ptr
    void add(bool is_recv, const void *ptr, int dir, MPI_Datatype dt, long long count, bool whole = true)
    {
        if (count < 0) { bad = true; return; }
        const DtypeInfo *d = dtype_info(dt);
        if (!d) { bad = true; return; }
        BufRef &b = out[n++];
        b = BufRef{is_recv, const_cast<void *>(ptr), dir, 0, 0, whole && d->contig, NM_MEM_HOST, -1};
        dtype_span(d, 0, count, &b.lo, &b.hi);
    }
    // per-rank counts/displacements (in extents of dt)
    void addv(bool is_recv, const void *ptr, int dir, MPI_Datatype dt, const int *counts, const int *displs, int nr)
    {
        const DtypeInfo *d = dtype_info(dt);
        if (!d || !counts || !displs) { bad = true; return; }
        BufRef &b = out[n++];
        b = BufRef{is_recv, const_cast<void *>(ptr), dir, 0, 0, false, NM_MEM_HOST, -1};
        bool any = false;
        for (int i = 0; i < nr; i++) {
            if (counts[i] < 0) { bad = true; return; }
            if (counts[i] == 0) continue;
            MPI_Aint lo, hi;
            dtype_span(d, (MPI_Aint)displs[i] * d->extent, counts[i], &lo, &hi);
            if (!any || lo < b.lo) b.lo = lo;
            if (!any || hi > b.hi) b.hi = hi;
            any = true;
        }
    }
    // alltoallw: byte displacements, a type per rank
    void addw(bool is_recv, const void *ptr, int dir, const MPI_Datatype *types, const int *counts,
              const int *displs, int nr)
    {
        if (!types || !counts || !displs) { bad = true; return; }
        BufRef &b = out[n++];
        b = BufRef{is_recv, const_cast<void *>(ptr), dir, 0, 0, false, NM_MEM_HOST, -1};
        bool any = false;
        for (int i = 0; i < nr; i++) {
            if (counts[i] < 0) { bad = true; return; }
            if (counts[i] == 0) continue;
            const DtypeInfo *d = dtype_info(types[i]);
            if (!d) { bad = true; return; }
            MPI_Aint lo, hi;
            dtype_span(d, displs[i], counts[i], &lo, &hi);
            if (!any || lo < b.lo) b.lo = lo;
            if (!any || hi > b.hi) b.hi = hi;
            any = true;
        }
    }
};

}  // namespace

bool is_root_side(const nm_op_t *o, const CommState *cs)
{
    return cs && (cs->inter ? o->root == MPI_ROOT : o->root == cs->rank);
}

bool stype_used(const nm_op_t *o, const CommState *cs)
{
    if (o->sbuf == MPI_IN_PLACE) return false;
    if (o->kind == NM_OPK_SCATTER || o->kind == NM_OPK_SCATTERV) return is_root_side(o, cs);
    return o->stype != MPI_DATATYPE_NULL;
}

bool rtype_used(const nm_op_t *o, const CommState *cs)
{
    if (o->kind == NM_OPK_GATHER || o->kind == NM_OPK_GATHERV) return is_root_side(o, cs);
    if ((o->kind == NM_OPK_SCATTER || o->kind == NM_OPK_SCATTERV) && o->rbuf == MPI_IN_PLACE) return false;
    return o->rtype != MPI_DATATYPE_NULL;
}

int op_buffers(const nm_op_t *o, const CommState *cs, BufRef out[2])
{
    Builder bl{out};
    const bool inplace_s = o->sbuf == MPI_IN_PLACE;
    const int rank = cs ? cs->rank : 0;
    const int n = cs ? (cs->inter ? cs->remote_size : cs->size) : 1;  // ranks data comes from/goes to
    const bool inter = cs && cs->inter;
    // rooted collectives: am I the root, a leaf, or (intercomm MPI_PROC_NULL) not involved?
    bool root = false, leaf = false;
    if (o->kind == NM_OPK_REDUCE || o->kind == NM_OPK_BCAST || o->kind == NM_OPK_GATHER ||
        o->kind == NM_OPK_GATHERV || o->kind == NM_OPK_SCATTER || o->kind == NM_OPK_SCATTERV) {
        if (inter) {
            root = o->root == MPI_ROOT;
            leaf = o->root >= 0;
        } else {
            if (o->root < 0 || o->root >= cs->size) return -1;
            root = o->root == rank;
            leaf = !root;
        }
    }
    const int ios = inplace_s ? BUF_INOUT : BUF_OUT;  // receive buffer direction under IN_PLACE

    switch (o->kind) {
    case NM_OPK_ALLREDUCE:
    case NM_OPK_SCAN:
        if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        bl.add(true, o->rbuf, ios, o->rtype, o->rcount);
        break;
    case NM_OPK_EXSCAN:  // rank 0's result is undefined: keep its old contents
        if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        bl.add(true, o->rbuf, BUF_INOUT, o->rtype, o->rcount);
        break;
    case NM_OPK_REDUCE:
        if (root) {
            if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
            bl.add(true, o->rbuf, ios, o->rtype, o->rcount);
        } else if (leaf) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        }
        break;
    case NM_OPK_BCAST:
        if (root || leaf) bl.add(true, o->rbuf, root ? BUF_IN : BUF_OUT, o->rtype, o->rcount);
        break;
    case NM_OPK_ALLGATHER:
        if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        bl.add(true, o->rbuf, ios, o->rtype, (long long)o->rcount * n);
        break;
    case NM_OPK_ALLGATHERV:
        if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        bl.addv(true, o->rbuf, ios == BUF_OUT ? BUF_INOUT : ios, o->rtype, o->rcounts, o->rdispls, n);
        break;
    case NM_OPK_ALLTOALL:
        if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, (long long)o->scount * n);
        bl.add(true, o->rbuf, ios, o->rtype, (long long)o->rcount * n);
        break;
    case NM_OPK_ALLTOALLV:
        if (!inplace_s) bl.addv(false, o->sbuf, BUF_IN, o->stype, o->scounts, o->sdispls, n);
        bl.addv(true, o->rbuf, BUF_INOUT, o->rtype, o->rcounts, o->rdispls, n);
        break;
    case NM_OPK_ALLTOALLW:
        if (!inplace_s) bl.addw(false, o->sbuf, BUF_IN, o->stypes, o->scounts, o->sdispls, n);
        bl.addw(true, o->rbuf, BUF_INOUT, o->rtypes, o->rcounts, o->rdispls, n);
        break;
    case NM_OPK_REDUCE_SCATTER: {
        if (inter || !o->rcounts) return -1;  // intercomm reduce_scatter on device: not described
        long long total = 0;
        for (int i = 0; i < cs->size; i++) {
            if (o->rcounts[i] < 0) return -1;
            total += o->rcounts[i];
        }
        if (!inplace_s) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, total);
            bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcounts[rank]);
        } else {
            bl.add(true, o->rbuf, BUF_INOUT, o->rtype, total);
        }
        break;
    }
    case NM_OPK_REDUCE_SCATTER_BLOCK:
        if (inter) return -1;
        if (!inplace_s) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, (long long)o->rcount * cs->size);
            bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcount);
        } else {
            bl.add(true, o->rbuf, BUF_INOUT, o->rtype, (long long)o->rcount * cs->size);
        }
        break;
    case NM_OPK_GATHER:
        if (root) {
            if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
            bl.add(true, o->rbuf, ios, o->rtype, (long long)o->rcount * n);
        } else if (leaf) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        }
        break;
    case NM_OPK_GATHERV:
        if (root) {
            if (!inplace_s) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
            bl.addv(true, o->rbuf, BUF_INOUT, o->rtype, o->rcounts, o->rdispls, n);
        } else if (leaf) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        }
        break;
    case NM_OPK_SCATTER:
        if (root) {
            bl.add(false, o->sbuf, BUF_IN, o->stype, (long long)o->scount * n);
            if (o->rbuf != MPI_IN_PLACE && !inter) bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcount);
        } else if (leaf) {
            bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcount);
        }
        break;
    case NM_OPK_SCATTERV:
        if (root) {
            bl.addv(false, o->sbuf, BUF_IN, o->stype, o->scounts, o->sdispls, n);
            if (o->rbuf != MPI_IN_PLACE && !inter) bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcount);
        } else if (leaf) {
            bl.add(true, o->rbuf, BUF_OUT, o->rtype, o->rcount);
        }
        break;
    case NM_OPK_SEND:
        if (o->peer != MPI_PROC_NULL) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        break;
    case NM_OPK_RECV:  // a shorter message leaves the tail untouched: copy in, copy back
        if (o->rpeer != MPI_PROC_NULL) bl.add(true, o->rbuf, BUF_INOUT, o->rtype, o->rcount, false);
        break;
    case NM_OPK_MRECV:
        if (o->msg && *o->msg != MPI_MESSAGE_NO_PROC && *o->msg != MPI_MESSAGE_NULL)
            bl.add(true, o->rbuf, BUF_INOUT, o->rtype, o->rcount, false);
        break;
    case NM_OPK_SENDRECV:
        if (o->peer != MPI_PROC_NULL) bl.add(false, o->sbuf, BUF_IN, o->stype, o->scount);
        if (o->rpeer != MPI_PROC_NULL) bl.add(true, o->rbuf, BUF_INOUT, o->rtype, o->rcount, false);
        break;
    case NM_OPK_SENDRECV_REPLACE:
        if (o->peer != MPI_PROC_NULL || o->rpeer != MPI_PROC_NULL)
            bl.add(true, o->rbuf, BUF_INOUT, o->rtype, o->rcount, false);
        break;
    default:
        return 0;
    }
    return bl.bad ? -1 : bl.n;
}

}  // namespace ncclmpi
