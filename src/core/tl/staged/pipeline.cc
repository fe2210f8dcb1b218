// ncclmpi: large blocking elementwise collectives staged in chunks through pinned host memory
// (staging.h, stage_pipelined). The chunks, their calls of the real MPI and the two agreements
// are the same on every rank (route.h, nm_stage_pipeline: shared facts only); what a rank does
// locally (copies, packing, its memory) may fail on that rank alone, and then every rank returns
// the same error.
#include "core/tl/staged/staging.h"

#include <string.h>

#include <algorithm>
#include <string>

#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"
#include "core/comm/process_group.h"
#include "core/cuda/memkind.h"
#include "core/op_table.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

namespace {

// The buffer of one side of a pipelined call: where its element 0 is, its type, its memory.
struct Side {
    char *base = nullptr;  // element 0 (the pointer as the caller gave it)
    const DtypeInfo *d = nullptr;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    bool device = false;
    bool dense() const { return d && d->contig && device; }
};

// One pipelined call: the plan every rank shares, this rank's sides, what went wrong here.
struct Pipe {
    const OpCtx *c;
    nm_pipe_t p;
    Device *dev = nullptr;
    Side in, out;
    bool do_in = false, do_out = false;  // this rank copies data in / results out
    MPI_Datatype ct = MPI_DATATYPE_NULL; // the chunk calls' datatype (MPI_BYTE, or the caller's)
    MPI_Aint shift = 0;                  // element 0 of that datatype lies this far before its data
    int *mpi_rc = nullptr;
    std::string *why = nullptr;
    size_t bytes(unsigned long long k) const  // chunk k's
    {
        return (size_t)(std::min(p.per, p.units - k * p.per) * p.unit);
    }
    size_t at(unsigned long long k) const { return (size_t)(k * p.per * p.unit); }
};

nm_status_t fail(const Pipe &q, nm_status_t st, const std::string &what)
{
    *q.why = what;
    return st;
}

nm_status_t no_mem(const Pipe &q, size_t n)
{
    return fail(q, NM_ERR_NO_MEM, "pipelined staging: cannot allocate " + std::to_string(n) + " bytes of host memory");
}

// One chunk through the real MPI, in place on host memory h (its data; element 0 at h - shift).
int chunk_mpi(const Pipe &q, char *h, int n)
{
    const nm_op_t *o = q.c->o;
    void *b = h - q.shift;
    switch (o->kind) {
    case NM_OPK_ALLREDUCE: return PMPI_Allreduce(MPI_IN_PLACE, b, n, q.ct, o->op, o->comm);
    case NM_OPK_SCAN: return PMPI_Scan(MPI_IN_PLACE, b, n, q.ct, o->op, o->comm);
    case NM_OPK_REDUCE:
        return q.c->root ? PMPI_Reduce(MPI_IN_PLACE, b, n, q.ct, o->op, o->root, o->comm)
                         : PMPI_Reduce(b, nullptr, n, q.ct, o->op, o->root, o->comm);
    default: return PMPI_Bcast(b, n, q.ct, o->root, o->comm);
    }
}

// Every rank's outcome of a step, agreed by one PMPI_Allreduce of two ints: the failure with the
// highest code, of the lowest rank that had it, becomes every rank's (the same MPI error class
// everywhere); a rank that did not have it says where it happened. A failure of the agreement
// itself is the real MPI's: its code goes to *mpi_rc.
nm_status_t agree(const Pipe &q, nm_status_t mine)
{
    int v[2] = {mine == NM_OK ? 0 : -(int)mine, q.c->rank}, all[2] = {0, 0};
    const int rc = PMPI_Allreduce(v, all, 1, MPI_2INT, MPI_MAXLOC, q.c->o->comm);
    if (rc != MPI_SUCCESS) {
        *q.mpi_rc = rc;
        return NM_OK;
    }
    if (all[0] == 0) return NM_OK;
    if (all[1] != q.c->rank)
        *q.why = (mine != NM_OK ? *q.why + "; " : std::string()) + "pipelined staging failed on rank " +
                 std::to_string(all[1]) + " of the communicator (that rank's error says why): every rank returns its error";
    return (nm_status_t)-all[0];
}

// sd's count elements as dense bytes at `dense` (to_dense), or back from there: through a host
// image of its span (its gaps kept), by the layout's runs, or by the real MPI's packing where
// the layout has too many runs to list.
nm_status_t side_dense(const Pipe &q, const Side &sd, char *dense, size_t total, bool to_dense)
{
    const int count = q.c->o->rcount;
    MPI_Aint lo, hi;
    dtype_span(sd.d, 0, count, &lo, &hi);
    const size_t n = (size_t)(hi - lo);
    size_t cls = 0;
    char *span = (char *)pinned_get(n ? n : 1, q.dev, &cls);
    if (!span) return no_mem(q, n);
    char *hb = span - lo;  // host image of element 0
    nm_status_t st = NM_OK;
    if (sd.device && cu.cuMemcpy((CUdeviceptr)span, (CUdeviceptr)(sd.base + lo), n) != CUDA_SUCCESS)
        st = fail(q, NM_ERR_CUDA, "pipelined staging: copying the buffer to the host failed");
    else if (!sd.device)
        memcpy(span, sd.base + lo, n);
    Layout l;
    int isz = 0, pos = 0;
    if (st != NM_OK) {
    } else if (layout_build(sd.type, count, 1u << 20, &l)) {
        if (to_dense) layout_pack_host(l, hb, dense);
        else layout_unpack_host(l, dense, hb);
    } else if (!nm_int_fits(total, &isz)) {
        st = fail(q, NM_ERR_COUNT, "pipelined staging: a datatype of more than 2^20 runs over more than 2^31-1 bytes");
    } else if ((to_dense ? PMPI_Pack(hb, count, sd.type, dense, isz, &pos, q.c->o->comm)
                         : PMPI_Unpack(dense, isz, &pos, hb, count, sd.type, q.c->o->comm)) != MPI_SUCCESS) {
        st = fail(q, NM_ERR_TYPE, "pipelined staging: the real MPI could not pack the datatype");
    }
    if (st == NM_OK && !to_dense) {
        if (!sd.device) memcpy(sd.base + lo, span, n);
        else if (cu.cuMemcpy((CUdeviceptr)(sd.base + lo), (CUdeviceptr)span, n) != CUDA_SUCCESS)
            st = fail(q, NM_ERR_CUDA, "pipelined staging: copying the result to the device failed");
    }
    pinned_put(span, cls);
    return st;
}

// A rank whose buffers are not dense device bytes: the whole buffer packed on the host, the
// same chunked calls, unpacked after. No overlap, same calls as the other ranks.
nm_status_t pipelined_packed(const Pipe &q)
{
    const size_t total = (size_t)(q.p.units * q.p.unit);
    size_t cls = 0;
    char *h = (char *)pinned_get(total ? total : 1, q.dev, &cls);
    nm_status_t st = h ? NM_OK : no_mem(q, total);
    if (st == NM_OK && q.do_in) st = side_dense(q, q.in, h, total, true);
    st = agree(q, st);  // (no rank makes a chunk call unless every rank has its data in place)
    if (st == NM_OK && *q.mpi_rc == MPI_SUCCESS) {
        for (unsigned long long k = 0; k < q.p.nchunks && *q.mpi_rc == MPI_SUCCESS; k++)
            *q.mpi_rc = chunk_mpi(q, h + q.at(k), (int)(q.bytes(k) / q.p.unit));
        if (*q.mpi_rc == MPI_SUCCESS) st = agree(q, q.do_out ? side_dense(q, q.out, h, total, false) : NM_OK);
    }
    if (h) pinned_put(h, cls);
    return st;
}

// Dense device bytes on both sides: copy-in of chunk k+1 and copy-out of chunk k-1 overlap the
// real MPI's work on chunk k, through two slots.
struct Dense {
    const Pipe &q;
    Lane *l = nullptr;
    char *slot[2] = {nullptr, nullptr};
    size_t cls[2] = {0, 0};
    nm_status_t own = NM_OK;  // this rank's copies
    explicit Dense(const Pipe &pq) : q(pq) {}
    void wait(CUevent e)
    {
        if (cu.cuEventSynchronize(e) != CUDA_SUCCESS && own == NM_OK)
            own = fail(q, NM_ERR_CUDA, "pipelined staging: waiting for a copy failed");
    }
    nm_status_t copy_in(unsigned long long k)
    {
        if (!q.do_in) return NM_OK;
        const char *src = q.in.base + q.in.d->true_lb + q.at(k);
        if (cu.cuMemcpyAsync((CUdeviceptr)slot[k & 1], (CUdeviceptr)src, q.bytes(k), l->stream) != CUDA_SUCCESS ||
            cu.cuEventRecord(l->in_ev[k & 1], l->stream) != CUDA_SUCCESS)
            return fail(q, NM_ERR_CUDA, "pipelined staging: copying a chunk to the host failed");
        return NM_OK;
    }
    nm_status_t copy_out(unsigned long long k)
    {
        char *dst = q.out.base + q.out.d->true_lb + q.at(k);
        if (cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)slot[k & 1], q.bytes(k), l->stream2) != CUDA_SUCCESS ||
            cu.cuEventRecord(l->out_ev[k & 1], l->stream2) != CUDA_SUCCESS)
            return fail(q, NM_ERR_CUDA, "pipelined staging: copying a chunk back to the device failed");
        return NM_OK;
    }
    nm_status_t setup()
    {
        const size_t cb = (size_t)(q.p.per * q.p.unit);
        if (!(l = lane_get(q.dev))) return fail(q, NM_ERR_CUDA, "pipelined staging: no copy streams on the device");
        for (int i = 0; i < 2; i++)
            if (!(slot[i] = (char *)pinned_get(cb, q.dev, &cls[i]))) return no_mem(q, cb);
        nm_status_t st = order_after_app(l, l->stream);
        if (st == NM_OK) st = order_after_app(l, l->stream2);
        if (st == NM_OK && q.p.nchunks) st = copy_in(0);
        return st;
    }
    // every chunk's call is made, whatever failed here since: the last agreement tells every rank
    void run()
    {
        const unsigned long long nc = q.p.nchunks;
        for (unsigned long long k = 0; k < nc && *q.mpi_rc == MPI_SUCCESS; k++) {
            if (q.do_out && k >= 1 && k + 1 < nc) wait(l->out_ev[(k + 1) & 1]);  // slot free again
            if (k + 1 < nc && own == NM_OK) own = copy_in(k + 1);
            if (q.do_in) wait(l->in_ev[k & 1]);
            else if (q.do_out && k >= 2) wait(l->out_ev[k & 1]);
            *q.mpi_rc = chunk_mpi(q, slot[k & 1], (int)(q.bytes(k) / q.p.unit));
            if (q.do_out && *q.mpi_rc == MPI_SUCCESS && own == NM_OK) own = copy_out(k);
        }
    }
    ~Dense()
    {
        if (l && ((cu.cuStreamSynchronize(l->stream) != CUDA_SUCCESS) | (cu.cuStreamSynchronize(l->stream2) != CUDA_SUCCESS)))
            if (own == NM_OK) own = NM_ERR_CUDA;
        for (int i = 0; i < 2; i++)
            if (slot[i]) pinned_put(slot[i], cls[i]);
    }
};

nm_status_t pipelined_dense(const Pipe &q)
{
    Dense d(q);
    nm_status_t st = agree(q, d.setup());  // (no rank makes a chunk call unless every rank can)
    if (st != NM_OK || *q.mpi_rc != MPI_SUCCESS) return st;
    d.run();
    if (*q.mpi_rc != MPI_SUCCESS) return NM_OK;  // (the real MPI's error is the call's)
    if (d.l && ((cu.cuStreamSynchronize(d.l->stream) != CUDA_SUCCESS) | (cu.cuStreamSynchronize(d.l->stream2) != CUDA_SUCCESS)) &&
        d.own == NM_OK)
        d.own = fail(q, NM_ERR_CUDA, "pipelined staging: a copy failed");
    NM_DEBUG(STAGE, "%s: %llu chunks of %llu bytes pipelined", nm_opkind_name(q.c->o->kind), q.p.nchunks, q.p.per * q.p.unit);
    return agree(q, d.own);
}

}  // namespace

bool stage_pipeline_applies(const OpCtx &c, nm_pipe_t *plan)
{
    const DtypeInfo *d = c.rd ? c.rd : c.sd;
    nm_pipe_in_t in;
    memset(&in, 0, sizeof(in));
    in.kind = c.o->kind;
    in.flags = c.o->flags;
    in.agree = nm_cfg.AGREE;
    in.inter = c.inter;
    in.type_known = d != nullptr;
    in.contig = d && d->contig;
    in.esize = d ? d->size : 0;
    in.count = c.o->rcount;
    in.chunk = nm_cfg.STAGE_CHUNK;
    *plan = nm_stage_pipeline(&in);
    return plan->applies != 0;
}

nm_status_t stage_pipelined(const OpCtx &c, const nm_pipe_t &plan, int device, int *mpi_rc, std::string *why)
{
    const nm_op_t *o = c.o;
    Pipe q;
    q.c = &c;
    q.p = plan;
    q.mpi_rc = mpi_rc;
    q.why = why;
    *mpi_rc = MPI_SUCCESS;
    const bool bcast = o->kind == NM_OPK_BCAST;
    const bool root = (o->kind == NM_OPK_REDUCE || bcast) ? c.root : true;
    q.do_in = !bcast || root;
    q.do_out = bcast ? !root : (o->kind != NM_OPK_REDUCE || root);
    q.in.base = (char *)(c.inplace || bcast ? o->rbuf : (void *)o->sbuf);
    q.in.d = c.inplace || bcast ? c.rd : c.sd;
    q.in.type = c.inplace || bcast ? o->rtype : o->stype;
    q.out.base = (char *)o->rbuf;
    q.out.d = c.rd;
    q.out.type = o->rtype;
    q.in.device = q.do_in && q.in.d && nm_mem_is_device(q.in.base + q.in.d->true_lb);
    q.out.device = q.do_out && q.out.d && nm_mem_is_device(q.out.base + q.out.d->true_lb);
    // a reduction's op gets the caller's datatype and whole elements (nm_stage_pipeline)
    const DtypeInfo *d = c.rd ? c.rd : c.sd;
    q.ct = plan.bytes ? MPI_BYTE : (c.rd ? o->rtype : o->stype);
    q.shift = plan.bytes ? 0 : d->true_lb;
    q.dev = device_get(device);
    if (!q.dev) return agree(q, fail(q, NM_ERR_CUDA, "pipelined staging: no CUDA context for device " + std::to_string(device)));
    DeviceGuard g(q.dev->ctx);
    if ((q.do_in && !q.in.dense()) || (q.do_out && !q.out.dense())) return pipelined_packed(q);
    return pipelined_dense(q);
}

}  // namespace ncclmpi
