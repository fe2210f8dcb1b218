// ncclmpi: the NCCL bodies of the collectives. Reductions use the mapped NCCL type; data
// movement goes as bytes (ncclInt8) over contiguous datatypes. v-variants and rooted
// collectives NCCL lacks are grouped send/recv.
#include "core/tl/nccl/coll_nccl.h"

#include <algorithm>
#include <vector>

#include "core/dtype/buffers.h"
#include "core/comm/comm_state.h"
#include "core/dtype/dtype.h"
#include "route/route.h"
#include "util/log.h"

namespace ncclmpi {

namespace {

using Body = ProcessGroup::Body;

inline char *at(const void *p, const DtypeInfo *d, size_t elems = 0)
{
    return (char *)p + d->true_lb + (MPI_Aint)elems * d->extent;
}

#define NC(call) NM_NCCL_CHECK(call, return NM_ERR_NCCL)

// Copy `bytes` device-to-device on s (runs before the group's NCCL kernels).
nm_status_t d2d(void *dst, const void *src, size_t bytes, CUstream s)
{
    if (!bytes || dst == src) return NM_OK;
    NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, s), return NM_ERR_CUDA);
    return NM_OK;
}

// Grouped send/recv: to each peer p send sb[p] bytes, receive rb[p] bytes.
struct P2P {
    std::vector<const char *> sp;
    std::vector<size_t> sn;
    std::vector<char *> rp;
    std::vector<size_t> rn;
    explicit P2P(int n) : sp(n, nullptr), sn(n, 0), rp(n, nullptr), rn(n, 0) {}
    nm_status_t post(ProcessGroup &pg, CUstream s) const
    {
        for (int p = 0; p < (int)sp.size(); p++) {
            if (sn[p]) NC(nccl.ncclSend(sp[p], sn[p], ncclInt8, p, pg.nccl_comm(), s));
            if (rn[p]) NC(nccl.ncclRecv(rp[p], rn[p], ncclInt8, p, pg.nccl_comm(), s));
        }
        return NM_OK;
    }
};

}  // namespace

nm_status_t coll_nccl(ProcessGroup &pg, const nm_op_t *o, Task *task)
{
    CommState *cs = comm_state(o->comm);
    const DtypeInfo *sd = stype_used(o, cs) ? dtype_info(o->stype) : nullptr;
    const DtypeInfo *rd = rtype_used(o, cs) ? dtype_info(o->rtype) : nullptr;
    if (!rd) rd = sd;  // reductions and bcast describe one type; in-place sends have none
    const bool inplace = o->sbuf == MPI_IN_PLACE;
    const int rank = pg.rank(), n = pg.size();
    const ncclDataType_t ty = (ncclDataType_t)(rd ? rd->nccl_type : 0);
    const ncclRedOp_t rop = (ncclRedOp_t)nm_map_op(o->op);
    const size_t cnt = (size_t)o->rcount;
    Body post;  // after the group: copies that must follow the NCCL kernels

    switch (o->kind) {
    case NM_OPK_ALLREDUCE:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            NC(nccl.ncclAllReduce(at(inplace ? o->rbuf : o->sbuf, rd), at(o->rbuf, rd), cnt, ty, rop, g.nccl_comm(), s));
            return NM_OK;
        }, task, post ? &post : nullptr);
    case NM_OPK_REDUCE:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            const void *src = inplace ? o->rbuf : o->sbuf;
            const DtypeInfo *d = inplace ? rd : sd;
            void *dst = rank == o->root ? at(o->rbuf, rd) : nullptr;
            NC(nccl.ncclReduce(at(src, d), dst, cnt, ty, rop, o->root, g.nccl_comm(), s));
            return NM_OK;
        }, task, post ? &post : nullptr);
    case NM_OPK_BCAST:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            NC(nccl.ncclBroadcast(at(o->rbuf, rd), at(o->rbuf, rd), cnt * rd->size, ncclInt8, o->root, g.nccl_comm(), s));
            return NM_OK;
        }, task, post ? &post : nullptr);
    case NM_OPK_ALLGATHER:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            size_t blk = cnt * rd->size;
            const char *src = inplace ? at(o->rbuf, rd) + rank * blk : at(o->sbuf, sd);
            NC(nccl.ncclAllGather(src, at(o->rbuf, rd), blk, ncclInt8, g.nccl_comm(), s));
            return NM_OK;
        }, task, post ? &post : nullptr);
    case NM_OPK_ALLGATHERV:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            P2P x(n);
            const char *mine = inplace ? at(o->rbuf, rd, o->rdispls[rank]) : at(o->sbuf, sd);
            size_t mybytes = (size_t)o->rcounts[rank] * rd->size;
            for (int p = 0; p < n; p++) {
                if (inplace && p == rank) continue;
                x.sp[p] = mine;
                x.sn[p] = mybytes;
                x.rp[p] = at(o->rbuf, rd, o->rdispls[p]);
                x.rn[p] = (size_t)o->rcounts[p] * rd->size;
            }
            return x.post(g, s);
        }, task, post ? &post : nullptr);
    case NM_OPK_ALLTOALL:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            size_t blk = cnt * rd->size;
            const char *src = inplace ? nullptr : at(o->sbuf, sd);
            if (inplace) {  // NCCL's alltoall is out of place: send from a copy
                char *tmp = (char *)g.scratch(blk * n);
                if (!tmp) return NM_ERR_NO_MEM;
                nm_status_t st = d2d(tmp, at(o->rbuf, rd), blk * n, s);
                if (st != NM_OK) return st;
                src = tmp;
            }
            if (nccl.ncclAlltoAll) {
                NC(nccl.ncclAlltoAll(src, at(o->rbuf, rd), blk, ncclInt8, g.nccl_comm(), s));
                return NM_OK;
            }
            P2P x(n);
            for (int p = 0; p < n; p++) {
                x.sp[p] = src + p * blk;
                x.sn[p] = blk;
                x.rp[p] = at(o->rbuf, rd) + p * blk;
                x.rn[p] = blk;
            }
            return x.post(g, s);
        }, task, post ? &post : nullptr);
    case NM_OPK_ALLTOALLV:
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            const void *sbase = o->sbuf;
            const int *sc = o->scounts, *sdp = o->sdispls;
            const DtypeInfo *sdi = sd;
            if (inplace) {  // send from a copy of the receive buffer's span
                MPI_Aint hi = 0;
                for (int p = 0; p < n; p++)
                    if (o->rcounts[p]) hi = std::max<MPI_Aint>(hi, (MPI_Aint)(o->rdispls[p] + o->rcounts[p]) * rd->extent);
                char *tmp = (char *)g.scratch((size_t)hi + 1);
                if (!tmp) return NM_ERR_NO_MEM;
                nm_status_t st = d2d(tmp, at(o->rbuf, rd), (size_t)hi, s);
                if (st != NM_OK) return st;
                sbase = tmp - rd->true_lb;
                sc = o->rcounts;
                sdp = o->rdispls;
                sdi = rd;
            }
            P2P x(n);
            for (int p = 0; p < n; p++) {
                x.sp[p] = at(sbase, sdi, sdp[p]);
                x.sn[p] = (size_t)sc[p] * sdi->size;
                x.rp[p] = at(o->rbuf, rd, o->rdispls[p]);
                x.rn[p] = (size_t)o->rcounts[p] * rd->size;
            }
            return x.post(g, s);
        }, task, post ? &post : nullptr);
    case NM_OPK_REDUCE_SCATTER_BLOCK:
        // In place the input is the whole receive buffer and the result belongs at its start.
        // Rank 0's block is already there; other ranks reduce into scratch and copy after, so
        // the rest of the buffer keeps its input (as the real MPI leaves it).
        if (inplace && rank != 0)
            post = [=](ProcessGroup &g, CUstream s) { return d2d(at(o->rbuf, rd), g.scratch(0), cnt * rd->size, s); };
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            const char *src = inplace ? at(o->rbuf, rd) : at(o->sbuf, sd);
            char *dst = inplace && rank != 0 ? (char *)g.scratch(cnt * rd->size) : at(o->rbuf, rd);
            if (!dst) return NM_ERR_NO_MEM;
            NC(nccl.ncclReduceScatter(src, dst, cnt, ty, rop, g.nccl_comm(), s));
            return NM_OK;
        }, task, post ? &post : nullptr);
    case NM_OPK_REDUCE_SCATTER: {
        bool equal = true;
        for (int p = 1; p < n; p++) equal = equal && o->rcounts[p] == o->rcounts[0];
        const DtypeInfo *d = rd;
        size_t mine = (size_t)o->rcounts[rank];
        if (inplace)
            post = [=](ProcessGroup &g, CUstream s) { return d2d(at(o->rbuf, d), g.scratch(0), mine * d->size, s); };
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            const char *src = inplace ? at(o->rbuf, d) : at(o->sbuf, sd);
            if (equal && !inplace) {
                NC(nccl.ncclReduceScatter(src, at(o->rbuf, d), mine, ty, rop, g.nccl_comm(), s));
                return NM_OK;
            }
            // one reduce per block; in place the result lands in scratch and moves after
            char *dst = inplace ? (char *)g.scratch(mine * d->size + 1) : at(o->rbuf, d);
            if (!dst) return NM_ERR_NO_MEM;
            size_t off = 0;
            for (int p = 0; p < n; p++) {
                if (o->rcounts[p])
                    NC(nccl.ncclReduce(src + off * d->extent, p == rank ? dst : nullptr, (size_t)o->rcounts[p], ty, rop,
                                       p, g.nccl_comm(), s));
                off += (size_t)o->rcounts[p];
            }
            return NM_OK;
        }, task, post ? &post : nullptr);
    }
    case NM_OPK_GATHER:
    case NM_OPK_GATHERV: {
        bool v = o->kind == NM_OPK_GATHERV;
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            bool root = rank == o->root;
            if (!v && nccl.ncclGather) {
                size_t blk = root ? cnt * rd->size : (size_t)o->scount * sd->size;
                const char *src = inplace ? at(o->rbuf, rd) + o->root * blk : at(o->sbuf, sd);
                NC(nccl.ncclGather(src, root ? at(o->rbuf, rd) : nullptr, blk, ncclInt8, o->root, g.nccl_comm(), s));
                return NM_OK;
            }
            P2P x(n);
            if (!(root && inplace)) {
                x.sp[o->root] = at(o->sbuf, sd);
                x.sn[o->root] = (size_t)o->scount * sd->size;
            }
            if (root)
                for (int p = 0; p < n; p++) {
                    if (inplace && p == rank) continue;
                    size_t c = v ? (size_t)o->rcounts[p] : cnt;
                    x.rp[p] = at(o->rbuf, rd, v ? (size_t)o->rdispls[p] : p * cnt);
                    x.rn[p] = c * rd->size;
                }
            return x.post(g, s);
        }, task, post ? &post : nullptr);
    }
    case NM_OPK_SCATTER:
    case NM_OPK_SCATTERV: {
        bool v = o->kind == NM_OPK_SCATTERV;
        bool rin = o->rbuf == MPI_IN_PLACE;
        return pg.run(o, [&](ProcessGroup &g, CUstream s) -> nm_status_t {
            bool root = rank == o->root;
            if (!v && nccl.ncclScatter) {
                size_t blk = root ? (size_t)o->scount * sd->size : cnt * rd->size;
                char *dst = rin ? at(o->sbuf, sd) + o->root * blk : at(o->rbuf, rd);
                NC(nccl.ncclScatter(root ? at(o->sbuf, sd) : nullptr, dst, blk, ncclInt8, o->root, g.nccl_comm(), s));
                return NM_OK;
            }
            P2P x(n);
            if (root)
                for (int p = 0; p < n; p++) {
                    if (rin && p == rank) continue;
                    size_t c = v ? (size_t)o->scounts[p] : (size_t)o->scount;
                    x.sp[p] = at(o->sbuf, sd, v ? (size_t)o->sdispls[p] : p * (size_t)o->scount);
                    x.sn[p] = c * sd->size;
                }
            if (!(root && rin)) {
                x.rp[o->root] = at(o->rbuf, rd);
                x.rn[o->root] = cnt * rd->size;
            }
            return x.post(g, s);
        }, task, post ? &post : nullptr);
    }
    default:
        NM_ERROR(COLL, "no NCCL body for %s", nm_opkind_name(o->kind));
        return NM_ERR_INTERNAL;
    }
}

}  // namespace ncclmpi
