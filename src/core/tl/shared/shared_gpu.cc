// ncclmpi: blocking collectives of ranks that share a GPU, through CUDA IPC (shared_gpu.h).
#include "core/tl/shared/shared_gpu.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/comm/comm_state.h"
#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "core/cuda/ipc_share.h"
#include "core/cuda/kernels.h"
#include "core/dtype/dense.h"
#include "core/dtype/dtype.h"
#include "core/op_table.h"
#include "core/tl/oneshot/oneshot.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "route/nm_op.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"
#include "util/watchdog.h"

namespace ncclmpi {

struct SharedWin {
    CUcontext ctx = nullptr;
    Device *dev = nullptr;
    int n = 0, rank = 0;
    size_t slot = 0;                        // bytes of one parity's slot
    CUdeviceptr own = 0;                    // this rank's allocation: two slots, then `tmp`
    CUdeviceptr tmp = 0;                    // a private slot: a result bound for host memory
    CUdeviceptr win[NM_SH_MAX_RANKS] = {};  // every rank's two slots as mapped here (own included)
    const CUfunction *fn = nullptr;
    unsigned long long min_bytes = 0;  // agreed: the smallest call that runs here
    uint64_t seq = 0;                  // chunks run (the same on every rank): parity seq & 1
};

void shared_release(SharedWin *w)
{
    if (!w) return;
    ipc_unshare(w->ctx, w->n, w->rank, w->win);
    DeviceGuard g(w->ctx);
    if (w->own) cu.cuMemFree(w->own);
    delete w;
}

void shared_setup(CommState *cs, int device)
{
    const int n = cs->size;
    // rank-consistent preconditions (the size, the settings, the library): no collective at all
    if (!nm_cfg.SHARED_GPU || !kernels_built() || cs->inter || n < 2 || n > NM_SH_MAX_RANKS) return;
    SharedWin *w = new SharedWin;
    w->n = n;
    w->rank = cs->rank;
    w->slot = ((size_t)nm_cfg.SHARED_SLOT + 255) / 256 * 256;
    std::string why;
    int mps = 0;
    CUdeviceptr mine = 0;
    if ((w->dev = device_get(device)) != nullptr) {
        w->ctx = w->dev->ctx;
        DeviceGuard g(w->ctx);
        CUresult r;
        mps = node_gpus().mps;  // this process's contexts go through an MPS server
        if (!(w->fn = kernels(w->ctx, &why))) {
        } else if ((r = cu.cuMemAlloc(&w->own, 3 * w->slot)) != CUDA_SUCCESS) {
            why = std::string("cuMemAlloc: ") + cuda_errstr(r);
        } else {
            mine = w->own;
            w->tmp = w->own + 2 * w->slot;
        }
    } else {
        why = "no device";
    }
    // without MPS the GPU time-slices the processes' kernels and small copies: from SHARED_MIN
    // bytes; under MPS (every rank: the largest wins) from 32 KiB, unless the setting is given
    // (measured on 1xH200, 2 ranks: doc/performance.md, "Ranks sharing a GPU")
    const unsigned long long min = mps && !nm_cfg_from_env("SHARED_MIN") ? 32768ull : (unsigned long long)nm_cfg.SHARED_MIN;
    unsigned long long mins[NM_SH_MAX_RANKS];
    if (!ipc_share(cs->comm, n, w->rank, w->ctx, mine, min, w->win, mins, &why)) {
        NM_DEBUG(INIT, "%s: no shared-GPU window: %s", cs->describe().c_str(), why.c_str());
        shared_release(w);
        return;
    }
    for (int q = 0; q < n; q++) w->min_bytes = std::max(w->min_bytes, mins[q]);
    NM_DEBUG(INIT, "%s: shared-GPU window of 2 x %zu bytes mapped on %d ranks, from %llu bytes", cs->describe().c_str(),
             w->slot, n, w->min_bytes);
    cs->shared = w;
}

// How a call's data moves through the windows. Every call is a loop over chunks of its *blocks*:
// block q is what rank q contributes to a result (Allreduce, Reduce, Bcast, Scan, Exscan: the whole
// message, one block per rank alike; Allgather(v), Gather: rank q's contribution), or what every
// rank sends rank q (Alltoall, Scatter, Reduce_scatter(_block)). A contributing rank writes
// `pieces` chunks per step into its slot (its own block, or a piece of each block: piece q for rank
// q), and the ranks that build a result read what they need.
struct Shape {
    bool reduce = false;  // combine the slots with a kernel (kind, op: the kernel's)
    int kind = 0, op = 0;
    size_t es = 1;        // bytes of one element the kernel combines; 1 for copies
    int pieces = 1;       // chunks per slot: 1, or n (the kind's, the same on every rank)
    int nsum = 0;         // slots the kernel combines: all n, or a prefix (Scan, Exscan)
    size_t bsz[NM_SH_MAX_RANKS] = {};  // bytes of block q
    size_t bpos[NM_SH_MAX_RANKS] = {};  // where block q starts in the dense image of all blocks
    size_t opos[NM_SH_MAX_RANKS] = {};  // ... and in a dense output buffer (Allgatherv: its displacement)
    size_t maxblk = 0, total = 0;       // the largest block; the message's bytes (the threshold's)
    size_t chunk = 0;                   // bytes of one block per step: the slot's share, whole elements
    bool in = false, out = false;       // this rank writes its slot / builds a result
    bool self = true;                   // out: also this rank's own block (not when it is in place already)
    bool gather = false;                // the result holds every rank's block (Allgather(v), Gather, Alltoall)
    int from = -1;                      // the result is the root's (Bcast) or its piece of the root's (Scatter)
    Side src{}, dst{};                  // the whole input, the whole result (Allgatherv: see vcounts)
    const int *vcounts = nullptr;       // Allgatherv: the result is n runs, run q at dst.p + opos[q]
};

// Everything but `in`, `out`, `self`, `src`, `dst` and `opos` comes from facts every rank shares
// (the kind, the signature's size and element, the counts MPI gives every rank, the op, the root,
// the communicator's size and the agreed slot), so every rank decides alike whether the call runs
// here and makes the same number of steps.
static bool shape_of(const OpCtx &c, const SharedWin *w, Shape *s)
{
    const nm_op_t *o = c.o;
    const int n = w->n, rank = w->rank;
    // the block's signature from the significant side (a leaf's receive arguments of Gather, a
    // root's of Scatter with MPI_IN_PLACE, mean nothing)
    const DtypeInfo *d = c.rd ? c.rd : c.sd;
    if (!d || d->size == 0) return false;
    const bool vec = o->kind == NM_OPK_ALLGATHERV || o->kind == NM_OPK_REDUCE_SCATTER;
    const long long cnt = vec ? 0 : c.rd ? o->rcount : o->scount;
    if (vec ? !o->rcounts : cnt <= 0) return false;
    switch (o->kind) {
    case NM_OPK_ALLREDUCE:
    case NM_OPK_REDUCE:
    case NM_OPK_SCAN:
    case NM_OPK_EXSCAN:
    case NM_OPK_REDUCE_SCATTER_BLOCK:
    case NM_OPK_REDUCE_SCATTER:
        if (!oneshot_reduction(d, o->op, &s->kind, &s->op)) return false;
        s->reduce = true;
        s->es = d->basic_size;
        break;
    case NM_OPK_BCAST:
    case NM_OPK_ALLGATHER:
    case NM_OPK_ALLGATHERV:
    case NM_OPK_GATHER:
    case NM_OPK_ALLTOALL:
    case NM_OPK_SCATTER:
        break;
    default:
        return false;
    }
    const bool piecewise = o->kind == NM_OPK_ALLTOALL || o->kind == NM_OPK_SCATTER ||
                           o->kind == NM_OPK_REDUCE_SCATTER_BLOCK || o->kind == NM_OPK_REDUCE_SCATTER;
    s->pieces = piecewise ? n : 1;
    s->gather = o->kind == NM_OPK_ALLGATHER || o->kind == NM_OPK_ALLGATHERV || o->kind == NM_OPK_GATHER ||
                o->kind == NM_OPK_ALLTOALL;
    for (int q = 0; q < n; q++) {
        if (vec && o->rcounts[q] < 0) return false;  // (the real MPI reports it)
        s->bsz[q] = (size_t)(vec ? o->rcounts[q] : cnt) * d->size;
        if (q + 1 < n) s->bpos[q + 1] = s->bpos[q] + s->bsz[q];
        s->maxblk = std::max(s->maxblk, s->bsz[q]);
    }
    // one block (the whole message) for the kinds whose ranks all hold one; n for the others
    const bool whole = !s->gather && !piecewise;
    s->total = whole ? s->bsz[0] : s->bpos[n - 1] + s->bsz[n - 1];
    if (s->total == 0) return false;
    // a piece of the slot, in whole elements (and 16-byte words where a piece holds some: the
    // copy kernel's unit)
    const size_t unit = s->es, share = w->slot / (size_t)s->pieces;
    s->chunk = share >= 16 * unit ? share / (16 * unit) * (16 * unit) : share / unit * unit;
    if (s->chunk == 0) return false;
    s->nsum = o->kind == NM_OPK_SCAN ? rank + 1 : o->kind == NM_OPK_EXSCAN ? rank : n;
    const MPI_Aint rext = c.rd ? c.rd->extent : 0;
    for (int q = 0; q < n; q++) s->opos[q] = s->gather ? s->bpos[q] : 0;
    switch (o->kind) {
    case NM_OPK_ALLREDUCE:
    case NM_OPK_REDUCE:
    case NM_OPK_SCAN:
    case NM_OPK_EXSCAN: {
        const bool from_out = c.inplace;  // (Reduce: only the root may pass MPI_IN_PLACE)
        s->in = true;
        s->out = o->kind == NM_OPK_REDUCE ? c.root : o->kind != NM_OPK_EXSCAN || rank > 0;
        s->src = Side{from_out ? o->rbuf : o->sbuf, cnt, from_out ? o->rtype : o->stype};
        s->dst = Side{o->rbuf, cnt, o->rtype};
        break;
    }
    case NM_OPK_REDUCE_SCATTER_BLOCK:
    case NM_OPK_REDUCE_SCATTER: {
        const long long all = (long long)(s->total / d->size);
        s->in = s->out = true;
        s->src = Side{c.inplace ? o->rbuf : o->sbuf, all, o->rtype};
        s->dst = Side{o->rbuf, (long long)(s->bsz[rank] / d->size), o->rtype};
        break;
    }
    case NM_OPK_BCAST:
        s->in = c.root;
        s->out = !c.root;
        s->from = o->root;
        s->src = s->dst = Side{o->rbuf, cnt, o->rtype};
        break;
    case NM_OPK_ALLGATHER:
    case NM_OPK_GATHER:
        // in place (Allgather: every rank; Gather: the root), a rank's block is in the result
        s->out = o->kind == NM_OPK_ALLGATHER || c.root;
        s->in = !(c.inplace && o->kind == NM_OPK_GATHER);
        s->self = !c.inplace;
        s->src = c.inplace ? Side{(const char *)o->rbuf + (MPI_Aint)rank * cnt * rext, cnt, o->rtype}
                           : Side{o->sbuf, o->scount, o->stype};
        s->dst = Side{o->rbuf, cnt * n, o->rtype};
        break;
    case NM_OPK_ALLGATHERV:
        s->in = s->out = true;
        s->self = !c.inplace;
        s->vcounts = o->rcounts;
        for (int q = 0; q < n; q++) s->opos[q] = (size_t)((MPI_Aint)o->rdispls[q] * rext);
        s->src = c.inplace ? Side{(const char *)o->rbuf + (MPI_Aint)o->rdispls[rank] * rext, o->rcounts[rank], o->rtype}
                           : Side{o->sbuf, o->scount, o->stype};
        s->dst = Side{o->rbuf, 0, o->rtype};  // (n runs: see vcounts)
        break;
    case NM_OPK_ALLTOALL:
        s->in = s->out = true;
        s->src = c.inplace ? Side{o->rbuf, cnt * n, o->rtype} : Side{o->sbuf, (long long)o->scount * n, o->stype};
        s->dst = Side{o->rbuf, cnt * n, o->rtype};
        break;
    case NM_OPK_SCATTER:
        s->in = c.root;
        s->out = !(c.root && o->rbuf == MPI_IN_PLACE);
        s->from = o->root;
        s->src = c.root ? Side{o->sbuf, (long long)o->scount * n, o->stype} : Side{};
        s->dst = Side{o->rbuf, cnt, o->rtype};
        break;
    }
    return true;
}

bool shared_applies(const OpCtx &c)
{
    const SharedWin *w = c.cs ? c.cs->shared : nullptr;
    nm_shared_in_t in;
    memset(&in, 0, sizeof(in));
    in.window = w != nullptr;
    in.inter = c.inter;
    in.flags = c.o->flags;
    in.agree = nm_cfg.AGREE;
    in.force_staged = nm_cfg.FORCE_STAGED;
    in.shape_ok = 1;  // (asked first without the shape: a staged call elsewhere builds none)
    if (!nm_shared_applies(&in)) return false;
    Shape s;
    in.shape_ok = shape_of(c, w, &s);
    in.total = s.total;
    in.min_bytes = w->min_bytes;
    return nm_shared_applies(&in) != 0;
}

// Copies on the legacy stream: device to device ones with 16-byte-aligned ends by the copy
// kernel (one launch for several), the others as driver copies
static nm_status_t copy_all(const SharedWin *w, const nm_copyv_region_t *r, int n, bool to_device)
{
    nm_copyv_region_t k[NM_SH_MAX_RANKS];
    int nk = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].bytes == 0) continue;
        if (to_device && copyv_batchable(r[i].dst, r[i].src, r[i].bytes, ~(size_t)0)) {
            k[nk++] = r[i];
            continue;
        }
        NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)r[i].dst, (CUdeviceptr)r[i].src, r[i].bytes, CU_STREAM_LEGACY), return NM_ERR_CUDA);
    }
    NM_CU_CHECK(nk ? copy_regions(w->ctx, k, (size_t)nk, CU_STREAM_LEGACY) : CUDA_SUCCESS, return NM_ERR_CUDA);
    return NM_OK;
}

// Allgatherv's run q of the result
static Side run_of(const Shape &s, int q) { return Side{(const char *)s.dst.p + s.opos[q], s.vcounts[q], s.dst.type}; }

// The result's dense image (pinned host memory) <-> the application's buffer: one Side, or
// Allgatherv's n runs at their displacements
static nm_status_t result_dense(const Shape &s, int n, char *img, bool pack)
{
    if (!s.vcounts) return pack ? dense_pack(s.dst, img, s.total) : dense_unpack(img, s.total, s.dst);
    nm_status_t st = NM_OK;
    for (int q = 0; q < n && st == NM_OK; q++) {
        if (s.bsz[q] == 0) continue;
        const Side run = run_of(s, q);
        st = pack ? dense_pack(run, img + s.bpos[q], s.bsz[q]) : dense_unpack(img + s.bpos[q], s.bsz[q], run);
    }
    return st;
}

// Whether the result can be written where it is: dense device memory (Allgatherv: every run)
static bool result_in_place(const Shape &s, int n, const DtypeInfo *d)
{
    if (!d || !d->contig) return false;
    if (!s.vcounts) return side_is_device(s.dst, d);
    for (int q = 0; q < n; q++)
        if (s.bsz[q] && !side_is_device(run_of(s, q), d))
            return false;
    return true;
}

nm_status_t shared_run(const OpCtx &c, int *mpi_rc)
{
    SharedWin *w = c.cs->shared;
    const nm_op_t *o = c.o;
    // the shape shared_applies found, again (kept out of nm_enter's frame, which every device call
    // builds); nothing in between changes its inputs (the 8-bit sum keeps its op here). Should it
    // fail, it fails on every rank alike (shared facts): an error, and no rank waits in a barrier.
    Shape s;
    if (!shape_of(c, w, &s)) return NM_ERR_INTERNAL;
    const int n = w->n, rank = w->rank;
    // the input: this rank's block, or every rank's piece (pieces = n); the result: every block
    // (gather), or this rank's (the others)
    const size_t in_total = s.pieces > 1 ? s.total : s.bsz[rank];
    const size_t out_total = s.gather ? s.total : s.bsz[rank];
    if (out_total == 0) s.out = false;  // (Reduce_scatter: a rank whose block is empty)
    *mpi_rc = MPI_SUCCESS;
    DeviceGuard g(w->ctx);
    // dense device memory is used where it is; any other buffer goes through pinned host memory
    nm_status_t st = NM_OK;
    const char *src = nullptr;
    char *dst = nullptr, *hin = nullptr, *hout = nullptr;
    size_t cin = 0, cout = 0;
    const DtypeInfo *ind = s.in ? dtype_info(s.src.type) : nullptr, *outd = s.out ? dtype_info(s.dst.type) : nullptr;
    if (s.in && ind && ind->contig && side_is_device(s.src, ind)) {
        src = (const char *)s.src.p + ind->true_lb;
    } else if (s.in && in_total) {
        if (!(hin = (char *)pinned_get(in_total, w->dev, &cin))) st = NM_ERR_NO_MEM;
        else st = dense_pack(s.src, hin, in_total);
        src = hin;
    }
    if (s.out && result_in_place(s, n, outd)) {
        dst = (char *)s.dst.p + outd->true_lb;
    } else if (s.out && !(hout = (char *)pinned_get(out_total, w->dev, &cout))) {
        st = NM_ERR_NO_MEM;
    } else if (s.out && !s.self) {  // the rank's own block is in the result already: keep it
        st = result_dense(s, n, hout, true);
    }
    char *const res = hout ? hout : dst;
    const size_t *pos = hout ? s.bpos : s.opos;  // where block q goes in res
    nm_copyv_region_t r[NM_SH_MAX_RANKS];
    for (size_t off = 0; off < s.maxblk && *mpi_rc == MPI_SUCCESS; off += s.chunk) {  // every rank makes every barrier
        // the bytes of block q in this step
        auto part = [&](int q) { return s.bsz[q] > off ? std::min(s.chunk, s.bsz[q] - off) : (size_t)0; };
        const size_t p = (size_t)(w->seq++ & 1) * w->slot;
        if (st == NM_OK && s.in) {
            if (s.pieces > 1)
                for (int q = 0; q < n; q++)
                    r[q] = nm_copyv_region_t{(char *)(w->own + p + (size_t)q * s.chunk), src + s.bpos[q] + off, part(q)};
            else
                r[0] = nm_copyv_region_t{(char *)(w->own + p), src + off, part(rank)};
            st = copy_all(w, r, s.pieces, !hin);
        }
        if (st == NM_OK) st = sync_legacy();  // (also the previous chunk's reads of the other parity)
        {
            WaitWatch ww(nm_fn_names[o->fn], "for the other ranks sharing the GPU (a barrier of the real MPI)", true);
            *mpi_rc = PMPI_Barrier(o->comm);
        }
        if (st != NM_OK || !s.out || *mpi_rc != MPI_SUCCESS) continue;
        // this rank's piece of a slot that holds one per rank
        const size_t piece = s.pieces > 1 ? (size_t)rank * s.chunk : 0;
        if (s.reduce) {
            const size_t m = part(rank);
            if (m == 0) continue;
            nm_sh_args_t a;
            memset(&a, 0, sizeof(a));
            for (int q = 0; q < s.nsum; q++) a.in[q] = (const char *)(w->win[q] + p + piece);
            a.out = hout ? (char *)w->tmp : dst + off;
            a.count = m / s.es;
            a.n = s.nsum;
            a.op = s.op;
            a.esize = (int)s.es;
            void *params[] = {&a};
            const unsigned blocks = (unsigned)std::min<size_t>((a.count + NM_OS_THREADS - 1) / NM_OS_THREADS, 2048);
            NM_CU_CHECK(cu.cuLaunchKernel(w->fn[NM_K_SH + s.kind], blocks, 1, 1, NM_OS_THREADS, 1, 1, 0, CU_STREAM_LEGACY, params, nullptr),
                        st = NM_ERR_CUDA);
            if (st == NM_OK && hout)
                NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)(hout + off), w->tmp, m, CU_STREAM_LEGACY), st = NM_ERR_CUDA);
            continue;
        }
        // copies: block q of the result from rank q's slot, or this rank's from the root's
        int k = 0;
        if (s.from >= 0) {
            r[k++] = nm_copyv_region_t{res + off, (const char *)(w->win[s.from] + p + piece), part(rank)};
        } else {
            for (int q = 0; q < n; q++)
                if (q != rank || s.self) r[k++] = nm_copyv_region_t{res + pos[q] + off, (const char *)(w->win[q] + p + piece), part(q)};
        }
        st = copy_all(w, r, k, !hout);
    }
    if (st == NM_OK) st = sync_legacy();
    if (st == NM_OK && hout && *mpi_rc == MPI_SUCCESS) st = result_dense(s, n, hout, false);
    if (hin) pinned_put(hin, cin);
    if (hout) pinned_put(hout, cout);
    NM_TRACE(COLL, "%s: %zu bytes through the shared-GPU window", nm_opkind_name(o->kind), s.total);
    return st;
}

}  // namespace ncclmpi
