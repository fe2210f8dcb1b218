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
    CUdeviceptr win[NM_OS_MAX_RANKS] = {};  // every rank's two slots as mapped here (own included)
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
    if (!nm_cfg.SHARED_GPU || !kernels_built() || cs->inter || n < 2 || n > NM_OS_MAX_RANKS) return;
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
    unsigned long long mins[NM_OS_MAX_RANKS];
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

bool shared_applies(const OpCtx &c)
{
    const SharedWin *w = c.cs ? c.cs->shared : nullptr;
    const nm_op_t *o = c.o;
    if (!w || (o->flags & (NM_OPF_NB | NM_OPF_PERS)) || nm_cfg.AGREE || nm_cfg.FORCE_STAGED || o->rcount <= 0) return false;
    const DtypeInfo *d = c.rd ? c.rd : c.sd;
    int kind, op;
    if (!d || d->size == 0) return false;
    switch (o->kind) {
    case NM_OPK_ALLREDUCE:
    case NM_OPK_REDUCE:
        if (!oneshot_reduction(d, o->op, &kind, &op)) return false;
        break;
    case NM_OPK_BCAST: break;
    default: return false;
    }
    return (unsigned long long)o->rcount * d->size >= w->min_bytes;
}

nm_status_t shared_run(const OpCtx &c, int *mpi_rc)
{
    SharedWin *w = c.cs->shared;
    const nm_op_t *o = c.o;
    const DtypeInfo *d = c.rd ? c.rd : c.sd;
    const bool bcast = o->kind == NM_OPK_BCAST;
    const bool root = (o->kind == NM_OPK_REDUCE || bcast) ? c.root : true;
    const bool do_in = !bcast || root;                                      // contributes a slot
    const bool do_out = bcast ? !root : (o->kind != NM_OPK_REDUCE || root);  // builds a result
    const bool from_out = c.inplace || bcast;
    const Side in{from_out ? o->rbuf : o->sbuf, o->rcount, from_out ? o->rtype : o->stype};
    const Side out{o->rbuf, o->rcount, o->rtype};
    const size_t total = (size_t)o->rcount * d->size;
    int kind = 0, opi = 0;
    size_t es = 1;  // bytes of one element the kernel combines (Bcast: bytes)
    if (!bcast) {
        oneshot_reduction(d, o->op, &kind, &opi);
        es = d->basic_size;
    }
    *mpi_rc = MPI_SUCCESS;
    DeviceGuard g(w->ctx);
    // dense device memory is used where it is; any other buffer goes through pinned host memory
    nm_status_t st = NM_OK;
    const char *src = nullptr;
    char *dst = nullptr, *hin = nullptr, *hout = nullptr;
    size_t cin = 0, cout = 0;
    const DtypeInfo *ind = do_in ? dtype_info(in.type) : nullptr, *outd = do_out ? dtype_info(out.type) : nullptr;
    if (do_in && ind && ind->contig && side_is_device(in, ind)) {
        src = (const char *)in.p + ind->true_lb;
    } else if (do_in) {
        if (!(hin = (char *)pinned_get(total, w->dev, &cin))) st = NM_ERR_NO_MEM;
        else st = dense_pack(in, hin, total);
        src = hin;
    }
    if (do_out && outd && outd->contig && side_is_device(out, outd)) {
        dst = (char *)out.p + outd->true_lb;
    } else if (do_out && !(hout = (char *)pinned_get(total, w->dev, &cout))) {
        st = NM_ERR_NO_MEM;
    }
    const size_t nel = total / es, ce = std::max<size_t>(1, w->slot / es);
    for (size_t k = 0; k < nel && *mpi_rc == MPI_SUCCESS; k += ce) {  // every rank makes every barrier
        const size_t m = std::min(ce, nel - k), off = k * es, bytes = m * es;
        const size_t p = (size_t)(w->seq++ & 1) * w->slot;
        if (st == NM_OK && do_in)
            NM_CU_CHECK(cu.cuMemcpyAsync(w->own + p, (CUdeviceptr)(src + off), bytes, CU_STREAM_LEGACY), st = NM_ERR_CUDA);
        if (st == NM_OK) st = sync_legacy();  // (also the previous chunk's reads of the other parity)
        {
            WaitWatch ww(nm_fn_names[o->fn], "for the other ranks sharing the GPU (a barrier of the real MPI)");
            *mpi_rc = PMPI_Barrier(o->comm);
        }
        if (st != NM_OK || !do_out || *mpi_rc != MPI_SUCCESS) continue;
        if (bcast) {
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)((hout ? hout : dst) + off), w->win[o->root] + p, bytes, CU_STREAM_LEGACY),
                        st = NM_ERR_CUDA);
            continue;
        }
        nm_sh_args_t a;
        memset(&a, 0, sizeof(a));
        for (int q = 0; q < w->n; q++) a.in[q] = (const char *)(w->win[q] + p);
        a.out = hout ? (char *)w->tmp : dst + off;
        a.count = m;
        a.n = w->n;
        a.op = opi;
        a.esize = (int)es;
        void *params[] = {&a};
        const unsigned blocks = (unsigned)std::min<size_t>((m + NM_OS_THREADS - 1) / NM_OS_THREADS, 2048);
        NM_CU_CHECK(cu.cuLaunchKernel(w->fn[NM_K_SH + kind], blocks, 1, 1, NM_OS_THREADS, 1, 1, 0, CU_STREAM_LEGACY, params, nullptr),
                    st = NM_ERR_CUDA);
        if (st == NM_OK && hout)
            NM_CU_CHECK(cu.cuMemcpyAsync((CUdeviceptr)(hout + off), w->tmp, bytes, CU_STREAM_LEGACY), st = NM_ERR_CUDA);
    }
    if (st == NM_OK) st = sync_legacy();
    if (st == NM_OK && hout && *mpi_rc == MPI_SUCCESS) st = dense_unpack(hout, total, out);
    if (hin) pinned_put(hin, cin);
    if (hout) pinned_put(hout, cout);
    NM_TRACE(COLL, "%s: %zu bytes through the shared-GPU window", nm_opkind_name(o->kind), total);
    return st;
}

}  // namespace ncclmpi
