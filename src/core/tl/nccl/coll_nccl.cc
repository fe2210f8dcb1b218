// ncclmpi: the NCCL bodies. Reductions use the NCCL type of the signature's basic type; data
// movement goes as bytes (ncclInt8). v-variants and rooted collectives NCCL lacks are grouped
// send/recv. Buffers come through NcclCall::seg (dense device bytes).
#include "core/tl/nccl/coll_nccl.h"

#include <limits.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "core/dtype/buffers.h"
#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"
#include "core/op_table.h"
#include "core/tl/oneshot/oneshot.h"
#include "core/tl/staged/staging.h"
#include "route/route.h"
#include "util/log.h"

namespace ncclmpi {

static const size_t kMaxRuns = 1 << 16;

void *NcclCall::scratch(size_t bytes)
{
    CUdeviceptr p = 0;
    // whole 256-byte blocks: NCCL's copies load in words and vectors, so a scratch of a few bytes
    // (an in-place Alltoall of one MPI_INT8_T per rank) was read past its end (compute-sanitizer
    // memcheck)
    if (cu.cuMemAllocAsync(&p, bytes ? (bytes + 255) / 256 * 256 : 256, s) != CUDA_SUCCESS) {
        NM_ERROR(COLL, "%s: cannot allocate %zu bytes of device scratch", op.describe().c_str(), bytes);
        if (st == NM_OK) st = NM_ERR_NO_MEM;
        return nullptr;
    }
    op.scratch.push_back(p);
    return (void *)p;
}

nm_status_t NcclCall::d2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src) return NM_OK;
    NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, s), return NM_ERR_CUDA);
    return NM_OK;
}

void NcclCall::post_d2d(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) op.post_first.push_back(PostCopy{PostCopy::D2D, (CUdeviceptr)dst, (CUdeviceptr)src, bytes, -1, nullptr});
}

static void *bounce(Op &op, size_t bytes)
{
    size_t cls = 0;
    void *p = pinned_get(bytes ? bytes : 1, nullptr, &cls);
    if (p) op.bounce.emplace_back(p, cls);
    return p;
}

// A layout without runs (more than kMaxRuns, or one layout.h cannot decode): packed on the host
// with PMPI_Pack, as layout.h says, through a pinned copy of the elements' whole span for device
// memory (copied in after the stream's earlier work, the host waiting for it; written back whole
// after the unpack, the bytes between the elements as they were read). Every rank still makes
// the same NCCL calls: only how this rank fills and empties its dense bytes changes. Slow; rare.
static char *seg_host_packed(NcclCall &c, int which, int dir, char *elem_base, size_t count, bool device)
{
    Op &op = c.op;
    const DtypeInfo &d = op.info(which);
    const size_t n = count * d.size;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(&d, 0, (long long)count, &lo, &hi);
    if (count > INT_MAX || n > INT_MAX) {
        NM_ERROR(COLL, "%s: a datatype whose layout has no runs, %zu bytes: too large to pack with PMPI_Pack", op.describe().c_str(), n);
        c.st = NM_ERR_TYPE;
        return elem_base;
    }
    NM_DEBUG(COLL, "%s: the datatype's layout has no runs here (more than %zu, or not decoded): packed on the host",
             op.describe().c_str(), kMaxRuns);
    HostPacked h{op.type(which), (int)count, elem_base, elem_base + lo, 0, (size_t)(hi - lo), c.pg.ctx()};
    if (device) {
        char *copy = (char *)bounce(op, h.span);
        if (!copy) {
            c.st = NM_ERR_NO_MEM;
            return elem_base;
        }
        h.dspan = (CUdeviceptr)h.hspan;
        h.hspan = copy;
        h.hbase = copy - lo;
        NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)copy, h.dspan, h.span, c.s), c.st = NM_ERR_CUDA; return elem_base);
        NM_CU_CHECK(cu.cuStreamSynchronize(c.s), c.st = NM_ERR_CUDA; return elem_base);
    }
    char *dense = (char *)c.scratch(n), *hd = (char *)bounce(op, n);
    if (!dense || !hd) {
        if (c.st == NM_OK) c.st = NM_ERR_NO_MEM;
        return elem_base;
    }
    int pos = 0;
    if ((dir & BUF_IN) && PMPI_Pack(h.hbase, h.count, h.type, hd, (int)n, &pos, MPI_COMM_SELF) != MPI_SUCCESS) {
        c.st = NM_ERR_TYPE;
        return elem_base;
    }
    if (dir & BUF_IN) NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)dense, (CUdeviceptr)hd, n, c.s), c.st = NM_ERR_CUDA; return elem_base);
    if (dir & BUF_OUT) {  // (after the copy above in stream order: hd serves both)
        op.packed.push_back(h);
        op.post.push_back(PostCopy{PostCopy::TO_BOUNCE, (CUdeviceptr)hd, (CUdeviceptr)dense, n, -1 - (int)op.packed.size(), nullptr});
    }
    return dense;
}

// The host side of a HostPacked receive: unpack, and write a device span back.
static void host_unpack(const HostPacked &h, const void *dense, size_t n)
{
    int pos = 0;
    if (PMPI_Unpack(dense, (int)n, &pos, h.hbase, h.count, h.type, MPI_COMM_SELF) != MPI_SUCCESS)
        NM_ERROR(COLL, "PMPI_Unpack of %zu bytes failed", n);
    if (!h.dspan) return;
    DeviceGuard g(h.ctx);
    NM_CU_CHECK(cu.cuMemcpy(h.dspan, (CUdeviceptr)h.hspan, h.span), );
}

// Dense device bytes for `count` elements of one buffer, `elem` extents from its pointer.
char *NcclCall::seg(int which, int dir, size_t elem, size_t count)
{
    const DtypeInfo &d = op.info(which);
    char *base = (char *)(which ? op.o.rbuf : (void *)op.o.sbuf);
    const nm_memkind_t kind = which ? op.rkind : op.skind;
    const bool device = kind == NM_MEM_DEVICE || kind == NM_MEM_MANAGED;
    char *elem_base = base + (MPI_Aint)elem * d.extent;  // where element `elem` starts
    char *first = elem_base + d.true_lb;
    const size_t n = count * d.size;
    if ((device && d.contig) || n == 0 || st != NM_OK) return first;
    int li = -1;
    if (!d.contig) {
        Layout l;
        if (!layout_build(op.type(which), (long long)count, kMaxRuns, &l)) return seg_host_packed(*this, which, dir, elem_base, count, device);
        op.layouts.push_back(std::move(l));
        li = (int)op.layouts.size() - 1;
    }
    char *dense = (char *)scratch(n);
    if (!dense) return first;
    if (dir & BUF_IN) {
        if (device) {  // non-contiguous device memory: pack on the GPU
            if (layout_pack_dev(op.layouts[li], (CUdeviceptr)elem_base, (CUdeviceptr)dense, s) != NM_OK) st = NM_ERR_CUDA;
        } else {  // host memory on a device rank: through a pinned bounce buffer
            char *b = (char *)bounce(op, n);
            if (!b) { st = NM_ERR_NO_MEM; return first; }
            if (li < 0) memcpy(b, first, n);
            else layout_pack_host(op.layouts[li], elem_base, b);
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)dense, (CUdeviceptr)b, n, s), st = NM_ERR_CUDA);
        }
    }
    if (dir & BUF_OUT) {
        if (device) {
            op.post.push_back(PostCopy{PostCopy::UNPACK_DEV, (CUdeviceptr)elem_base, (CUdeviceptr)dense, n, li, nullptr});
        } else {
            char *b = (char *)bounce(op, n);
            if (!b) { st = NM_ERR_NO_MEM; return first; }
            op.post.push_back(PostCopy{PostCopy::TO_BOUNCE, (CUdeviceptr)b, (CUdeviceptr)dense, n, li,
                                       li < 0 ? (void *)first : (void *)elem_base});
        }
    }
    return dense;
}

nm_status_t op_post_stream(Op &op, CUstream s)
{
    for (auto *list : {&op.post_first, &op.post})
        for (const PostCopy &p : *list) {
            switch (p.kind) {
            case PostCopy::D2D:
            case PostCopy::TO_BOUNCE:
                NM_CU_CHECK(cu.cuMemcpyAsync(p.dst, p.src, p.bytes, s), return NM_ERR_CUDA);
                break;
            case PostCopy::UNPACK_DEV:
                if (layout_unpack_dev(op.layouts[p.layout], p.src, p.dst, s) != NM_OK) return NM_ERR_CUDA;
                break;
            }
        }
    return NM_OK;
}

void op_post_host(Op &op)
{
    for (const PostCopy &p : op.post) {
        if (p.kind != PostCopy::TO_BOUNCE) continue;
        if (p.layout <= -2) host_unpack(op.packed[(size_t)(-2 - p.layout)], (void *)p.dst, p.bytes);
        else if (p.layout < 0) memcpy(p.host, (void *)p.dst, p.bytes);
        else layout_unpack_host(op.layouts[p.layout], (void *)p.dst, p.host);
    }
}

void op_release_resources(Op &op, CUstream s)
{
    for (CUdeviceptr p : op.scratch) cu.cuMemFreeAsync(p, s);
    op.scratch.clear();
    for (auto &b : op.bounce) pinned_put(b.first, b.second);
    op.bounce.clear();
    op.post_first.clear();
    op.post.clear();
    op.layouts.clear();
    op.packed.clear();
}

int nccl_carrier(Op &op, bool blocking)
{
    const nm_op_t &o = op.o;
    // (a send and a receive buffer of their own: MPICH refuses a call whose two buffers are one,
    // whatever the counts)
    static char dummy[16], rdummy[16];
    op.zeros.assign((size_t)op.n + 1, 0);
    int *z = op.zeros.data();
    MPI_Request *r = &op.carrier;
    switch (o.kind) {
    case NM_OPK_ALLTOALLV:
        return blocking ? PMPI_Alltoallv(dummy, z, z, MPI_BYTE, rdummy, z, z, MPI_BYTE, o.comm)
                        : PMPI_Ialltoallv(dummy, z, z, MPI_BYTE, rdummy, z, z, MPI_BYTE, o.comm, r);
    case NM_OPK_GATHERV:
        if (op.root)
            return blocking ? PMPI_Gatherv(dummy, 0, MPI_BYTE, rdummy, z, z, MPI_BYTE, o.root, o.comm)
                            : PMPI_Igatherv(dummy, 0, MPI_BYTE, rdummy, z, z, MPI_BYTE, o.root, o.comm, r);
        return blocking ? PMPI_Gatherv(dummy, 0, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, o.root, o.comm)
                        : PMPI_Igatherv(dummy, 0, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, o.root, o.comm, r);
    case NM_OPK_SCATTERV:
        if (op.root)
            return blocking ? PMPI_Scatterv(dummy, z, z, MPI_BYTE, rdummy, 0, MPI_BYTE, o.root, o.comm)
                            : PMPI_Iscatterv(dummy, z, z, MPI_BYTE, rdummy, 0, MPI_BYTE, o.root, o.comm, r);
        return blocking ? PMPI_Scatterv(nullptr, nullptr, nullptr, MPI_BYTE, rdummy, 0, MPI_BYTE, o.root, o.comm)
                        : PMPI_Iscatterv(nullptr, nullptr, nullptr, MPI_BYTE, rdummy, 0, MPI_BYTE, o.root, o.comm, r);
    default:
        return MPI_SUCCESS;
    }
}

// ---- the bodies -------------------------------------------------------------------------------
namespace {

ncclDataType_t red_type(const NcclCall &c, int which) { return (ncclDataType_t)c.op.info(which).nccl_type; }
ncclRedOp_t red_op(const NcclCall &c) { return (ncclRedOp_t)nm_map_op(c.op.o.op); }
// NCCL elements of `count` MPI elements (derived types of one basic type hold several)
size_t red_count(const NcclCall &c, int which, size_t count)
{
    size_t bs = nm_nccl_type_size(c.op.info(which).nccl_type);
    return bs ? c.bytes(which, count) / bs : 0;
}

// Grouped send/recv: to each peer p send sn[p] bytes, receive rn[p] bytes.
struct P2P {
    std::vector<const char *> sp;
    std::vector<size_t> sn;
    std::vector<char *> rp;
    std::vector<size_t> rn;
    explicit P2P(int n) : sp(n, nullptr), sn(n, 0), rp(n, nullptr), rn(n, 0) {}
    // self: this rank's own block is a local copy of the bytes both sides name (never an NCCL send
    // and receive to itself, which NCCL refuses when their sizes differ: a root passing a NULL
    // receive buffer and count 0 to MPI_Scatter, as mpi4py's tests do)
    nm_status_t post(NcclCall &c, int self) const
    {
        if (c.st != NM_OK) return c.st;
        for (int p = 0; p < (int)sp.size(); p++) {
            if (p == self) {
                const size_t k = sn[p] < rn[p] ? sn[p] : rn[p];
                if (k) c.post_d2d(rp[p], sp[p], k);
                continue;
            }
            if (sn[p]) c.call(NcclRec::SEND, sp[p], nullptr, sn[p], ncclInt8, 0, p);
            if (rn[p]) c.call(NcclRec::RECV, nullptr, rp[p], rn[p], ncclInt8, 0, p);
        }
        return NM_OK;
    }
};

}  // namespace

nm_status_t nccl_allreduce(NcclCall &c)
{
    if (c.op.oneshot) return oneshot_run(c);
    const nm_op_t &o = c.op.o;
    size_t cnt = (size_t)o.rcount;
    char *dst = c.seg(SEG_RECV, c.op.inplace ? BUF_INOUT : BUF_OUT, 0, cnt);
    const char *src = c.op.inplace ? dst : c.seg(SEG_SEND, BUF_IN, 0, cnt);
    if (c.st != NM_OK) return c.st;
    if (c.fuse) {  // packed, reduced and unpacked with others of its group
        *c.fuse = FuseSlot{src, dst};
        return NM_OK;
    }
    return c.call(NcclRec::ALLREDUCE, src, dst, red_count(c, SEG_RECV, cnt), red_type(c, SEG_RECV), red_op(c));
}

nm_status_t nccl_reduce(NcclCall &c)
{
    if (c.op.oneshot) return oneshot_run(c);
    const nm_op_t &o = c.op.o;
    size_t cnt = (size_t)o.rcount;
    if (!c.op.root) {
        const char *src = c.seg(SEG_SEND, BUF_IN, 0, cnt);
        if (c.st != NM_OK) return c.st;
        return c.call(NcclRec::REDUCE, src, nullptr, red_count(c, SEG_SEND, cnt), red_type(c, SEG_SEND), red_op(c), o.root);
    }
    char *dst = c.seg(SEG_RECV, c.op.inplace ? BUF_INOUT : BUF_OUT, 0, cnt);
    const char *src = c.op.inplace ? dst : c.seg(SEG_SEND, BUF_IN, 0, cnt);
    if (c.st != NM_OK) return c.st;
    return c.call(NcclRec::REDUCE, src, dst, red_count(c, SEG_RECV, cnt), red_type(c, SEG_RECV), red_op(c), o.root);
}

nm_status_t nccl_bcast(NcclCall &c)
{
    if (c.op.oneshot) return oneshot_run(c);
    const nm_op_t &o = c.op.o;
    size_t cnt = (size_t)o.rcount;
    char *buf = c.seg(SEG_RECV, c.op.root ? BUF_IN : BUF_OUT, 0, cnt);
    if (c.st != NM_OK) return c.st;
    return c.call(NcclRec::BCAST, buf, buf, c.bytes(SEG_RECV, cnt), ncclInt8, 0, o.root);
}

nm_status_t nccl_allgather(NcclCall &c)
{
    if (c.op.oneshot) return oneshot_run(c);
    const nm_op_t &o = c.op.o;
    const int n = c.op.n, rank = c.op.rank;
    size_t blk = c.bytes(SEG_RECV, (size_t)o.rcount);
    char *dst = c.seg(SEG_RECV, c.op.inplace ? BUF_INOUT : BUF_OUT, 0, (size_t)o.rcount * n);
    const char *src = c.op.inplace ? dst + rank * blk : c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount);
    if (c.st != NM_OK) return c.st;
    return c.call(NcclRec::ALLGATHER, src, dst, blk, ncclInt8);
}

nm_status_t nccl_allgatherv(NcclCall &c)
{
    const nm_op_t &o = c.op.o;
    const int n = c.op.n, rank = c.op.rank;
    P2P x(n);
    const char *mine = c.op.inplace ? c.seg(SEG_RECV, BUF_IN, (size_t)o.rdispls[rank], (size_t)o.rcounts[rank])
                                    : c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount);
    size_t mybytes = c.bytes(SEG_RECV, (size_t)o.rcounts[rank]);
    for (int p = 0; p < n; p++) {
        if (c.op.inplace && p == rank) continue;
        x.sp[p] = mine;
        x.sn[p] = mybytes;
        x.rp[p] = c.seg(SEG_RECV, BUF_OUT, (size_t)o.rdispls[p], (size_t)o.rcounts[p]);
        x.rn[p] = c.bytes(SEG_RECV, (size_t)o.rcounts[p]);
    }
    return x.post(c, c.op.rank);
}

nm_status_t nccl_alltoall(NcclCall &c)
{
    const nm_op_t &o = c.op.o;
    const int n = c.op.n;
    size_t blk = c.bytes(SEG_RECV, (size_t)o.rcount);
    char *dst = c.seg(SEG_RECV, c.op.inplace ? BUF_INOUT : BUF_OUT, 0, (size_t)o.rcount * n);
    const char *src;
    if (c.op.inplace) {  // NCCL's alltoall is out of place: send from a copy
        char *tmp = (char *)c.scratch(blk * n);
        if (!tmp) return c.st;
        nm_status_t st = c.d2d(tmp, dst, blk * n);
        if (st != NM_OK) return st;
        src = tmp;
    } else {
        src = c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount * n);
    }
    if (c.st != NM_OK) return c.st;
    if (nccl.ncclAlltoAll) return c.call(NcclRec::ALLTOALL, src, dst, blk, ncclInt8);
    P2P x(n);
    for (int p = 0; p < n; p++) {
        x.sp[p] = src + p * blk;
        x.sn[p] = blk;
        x.rp[p] = dst + p * blk;
        x.rn[p] = blk;
    }
    return x.post(c, c.op.rank);
}

nm_status_t nccl_alltoallv(NcclCall &c)
{
    const nm_op_t &o = c.op.o;
    const int n = c.op.n;
    P2P x(n);
    for (int p = 0; p < n; p++) {
        x.rn[p] = c.bytes(SEG_RECV, (size_t)o.rcounts[p]);
        if (c.op.inplace) {  // send each block from a copy of what the receive buffer held
            x.rp[p] = c.seg(SEG_RECV, BUF_INOUT, (size_t)o.rdispls[p], (size_t)o.rcounts[p]);
            char *tmp = x.rn[p] ? (char *)c.scratch(x.rn[p]) : nullptr;
            if (x.rn[p] && (!tmp || c.d2d(tmp, x.rp[p], x.rn[p]) != NM_OK)) return c.st != NM_OK ? c.st : NM_ERR_CUDA;
            x.sp[p] = tmp;
            x.sn[p] = x.rn[p];
        } else {
            x.rp[p] = c.seg(SEG_RECV, BUF_OUT, (size_t)o.rdispls[p], (size_t)o.rcounts[p]);
            x.sp[p] = c.seg(SEG_SEND, BUF_IN, (size_t)o.sdispls[p], (size_t)o.scounts[p]);
            x.sn[p] = c.bytes(SEG_SEND, (size_t)o.scounts[p]);
        }
    }
    return x.post(c, c.op.rank);
}

// In place the input is the whole receive buffer and the result belongs at its start. Rank 0's
// block is already there; other ranks reduce into scratch and copy after, so the rest of the
// buffer keeps its input (as the real MPI leaves it).
nm_status_t nccl_reduce_scatter_block(NcclCall &c)
{
    if (c.op.oneshot) return oneshot_run(c);
    const nm_op_t &o = c.op.o;
    const int rank = c.op.rank;
    size_t cnt = (size_t)o.rcount, total = cnt * c.op.size;
    const char *src;
    char *dst;
    if (c.op.inplace) {
        char *whole = c.seg(SEG_RECV, BUF_INOUT, 0, total);
        src = whole;
        dst = rank == 0 ? whole : (char *)c.scratch(c.bytes(SEG_RECV, cnt));
        if (rank != 0 && dst) c.post_d2d(whole, dst, c.bytes(SEG_RECV, cnt));
    } else {
        src = c.seg(SEG_SEND, BUF_IN, 0, total);
        dst = c.seg(SEG_RECV, BUF_OUT, 0, cnt);
    }
    if (c.st != NM_OK) return c.st;
    return c.call(NcclRec::REDUCE_SCATTER, src, dst, red_count(c, SEG_RECV, cnt), red_type(c, SEG_RECV), red_op(c));
}

nm_status_t nccl_reduce_scatter(NcclCall &c)
{
    const nm_op_t &o = c.op.o;
    const int rank = c.op.rank, n = c.op.size;
    bool equal = true;
    size_t total = 0;
    for (int p = 0; p < n; p++) {
        equal = equal && o.rcounts[p] == o.rcounts[0];
        total += (size_t)o.rcounts[p];
    }
    const int w = c.op.inplace ? SEG_RECV : SEG_SEND;  // which buffer holds the input
    size_t mine = (size_t)o.rcounts[rank];
    const char *src = c.seg(w, c.op.inplace ? BUF_INOUT : BUF_IN, 0, total);
    if (equal && !c.op.inplace) {
        char *dst = c.seg(SEG_RECV, BUF_OUT, 0, mine);
        if (c.st != NM_OK) return c.st;
        return c.call(NcclRec::REDUCE_SCATTER, src, dst, red_count(c, w, mine), red_type(c, w), red_op(c));
    }
    // one reduce per block; in place the result lands in scratch and moves to the start after
    char *dst;
    if (c.op.inplace) {
        dst = (char *)c.scratch(c.bytes(w, mine));
        if (dst) c.post_d2d((void *)src, dst, c.bytes(w, mine));
    } else {
        dst = c.seg(SEG_RECV, BUF_OUT, 0, mine);
    }
    if (c.st != NM_OK) return c.st;
    size_t off = 0;
    for (int p = 0; p < n; p++) {
        if (o.rcounts[p])
            c.call(NcclRec::REDUCE, src + c.bytes(w, off), p == rank ? dst : nullptr, red_count(c, w, (size_t)o.rcounts[p]),
                   red_type(c, w), red_op(c), p);
        off += (size_t)o.rcounts[p];
    }
    return NM_OK;
}

static nm_status_t gather_common(NcclCall &c, bool v)
{
    const nm_op_t &o = c.op.o;
    const int n = c.op.n, rank = c.op.rank;
    const bool root = c.op.root, inplace = c.op.inplace;
    // (NCCL's gather only where the root sends its whole block; else sends and receives)
    const bool whole = !root || inplace || c.bytes(SEG_RECV, (size_t)o.rcount) == c.bytes(SEG_SEND, (size_t)o.scount);
    if (!v && nccl.ncclGather && whole) {
        size_t blk = root ? c.bytes(SEG_RECV, (size_t)o.rcount) : c.bytes(SEG_SEND, (size_t)o.scount);
        char *dst = root ? c.seg(SEG_RECV, inplace ? BUF_INOUT : BUF_OUT, 0, (size_t)o.rcount * n) : nullptr;
        const char *src = root && inplace ? dst + o.root * blk : c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount);
        if (c.st != NM_OK) return c.st;
        return c.call(NcclRec::GATHER, src, dst, blk, ncclInt8, 0, o.root);
    }
    P2P x(n);
    if (!(root && inplace)) {
        x.sp[o.root] = c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount);
        x.sn[o.root] = c.bytes(SEG_SEND, (size_t)o.scount);
    }
    if (root)
        for (int p = 0; p < n; p++) {
            if (inplace && p == rank) continue;
            size_t cnt = v ? (size_t)o.rcounts[p] : (size_t)o.rcount;
            x.rp[p] = c.seg(SEG_RECV, BUF_OUT, v ? (size_t)o.rdispls[p] : p * (size_t)o.rcount, cnt);
            x.rn[p] = c.bytes(SEG_RECV, cnt);
        }
    return x.post(c, c.op.rank);
}

nm_status_t nccl_gather(NcclCall &c) { return gather_common(c, false); }
nm_status_t nccl_gatherv(NcclCall &c) { return gather_common(c, true); }

static nm_status_t scatter_common(NcclCall &c, bool v)
{
    const nm_op_t &o = c.op.o;
    const int n = c.op.n, rank = c.op.rank;
    const bool root = c.op.root, rin = o.rbuf == MPI_IN_PLACE;
    // (NCCL's scatter only where the root receives its whole block; else sends and receives)
    const bool whole = !root || rin || c.bytes(SEG_RECV, (size_t)o.rcount) == c.bytes(SEG_SEND, (size_t)o.scount);
    if (!v && nccl.ncclScatter && whole) {
        size_t blk = root ? c.bytes(SEG_SEND, (size_t)o.scount) : c.bytes(SEG_RECV, (size_t)o.rcount);
        char *src = root ? c.seg(SEG_SEND, BUF_IN, 0, (size_t)o.scount * n) : nullptr;
        char *dst = root && rin ? src + o.root * blk : c.seg(SEG_RECV, BUF_OUT, 0, (size_t)o.rcount);
        if (c.st != NM_OK) return c.st;
        return c.call(NcclRec::SCATTER, src, dst, blk, ncclInt8, 0, o.root);
    }
    P2P x(n);
    if (root)
        for (int p = 0; p < n; p++) {
            if (rin && p == rank) continue;
            size_t cnt = v ? (size_t)o.scounts[p] : (size_t)o.scount;
            x.sp[p] = c.seg(SEG_SEND, BUF_IN, v ? (size_t)o.sdispls[p] : p * (size_t)o.scount, cnt);
            x.sn[p] = c.bytes(SEG_SEND, cnt);
        }
    if (!(root && rin)) {
        x.rp[o.root] = c.seg(SEG_RECV, BUF_OUT, 0, (size_t)o.rcount);
        x.rn[o.root] = c.bytes(SEG_RECV, (size_t)o.rcount);
    }
    return x.post(c, c.op.rank);
}

nm_status_t nccl_scatter(NcclCall &c) { return scatter_common(c, false); }
nm_status_t nccl_scatterv(NcclCall &c) { return scatter_common(c, true); }

}  // namespace ncclmpi
