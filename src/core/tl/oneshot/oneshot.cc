// ncclmpi: the one-shot transport (oneshot.h): the window of a process group over CUDA IPC, the
// element kinds and ops the kernels implement, and the launch.
#include "core/tl/oneshot/oneshot.h"

#include <string.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/cuda/ipc_share.h"
#include "core/cuda/kernels.h"
#include "core/dtype/buffers.h"
#include "core/dtype/dtype.h"
#include "core/tl/nccl/coll_nccl.h"
#include "core/tl/oneshot/oneshot_abi.h"
#include "route/nm_op.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

struct OneshotWindow {
    CUcontext ctx = nullptr;
    int n = 0, rank = 0;
    size_t slot_bytes = 0, flags_off = 0, bytes = 0;
    CUdeviceptr win[NM_OS_MAX_RANKS] = {};  // win[rank] is this rank's allocation
    volatile unsigned *abort_host = nullptr;
    CUdeviceptr abort_dev = 0;
    const CUfunction *fn = nullptr;
    uint64_t seq = 0;  // one-shot calls launched on the group (the same count on every rank)
};

namespace {
// element kind of a predefined type, and the ops MPI defines on it (a bit per NM_OS_*)
enum : unsigned {
    ARITH = 1u << NM_OS_SUM | 1u << NM_OS_PROD | 1u << NM_OS_MIN | 1u << NM_OS_MAX,
    LOGIC = 1u << NM_OS_LAND | 1u << NM_OS_LOR | 1u << NM_OS_LXOR,
    BITS = 1u << NM_OS_BAND | 1u << NM_OS_BOR | 1u << NM_OS_BXOR,
    LOC = 1u << NM_OS_MINLOC | 1u << NM_OS_MAXLOC,
};

struct Kind {
    int kind;
    unsigned ops;
};

Kind int_kind(size_t size, bool is_signed)
{
    switch (size) {
    case 1: return {is_signed ? NM_OS_I8 : NM_OS_U8, ARITH | LOGIC | BITS};
    case 2: return {is_signed ? NM_OS_I16 : NM_OS_U16, ARITH | LOGIC | BITS};
    case 4: return {is_signed ? NM_OS_I32 : NM_OS_U32, ARITH | LOGIC | BITS};
    case 8: return {is_signed ? NM_OS_I64 : NM_OS_U64, ARITH | LOGIC | BITS};
    default: return {-1, 0};
    }
}

Kind kind_of(MPI_Datatype t)
{
    if (t == MPI_DATATYPE_NULL) return {-1, 0};
    int sz = 0;
    PMPI_Type_size(t, &sz);
    const MPI_Datatype sints[] = {MPI_SIGNED_CHAR, MPI_SHORT, MPI_INT, MPI_LONG, MPI_LONG_LONG, MPI_INT8_T,
                                  MPI_INT16_T, MPI_INT32_T, MPI_INT64_T, MPI_AINT, MPI_OFFSET, MPI_COUNT,
                                  MPI_INTEGER, MPI_INTEGER1, MPI_INTEGER2, MPI_INTEGER4, MPI_INTEGER8};
    const MPI_Datatype uints[] = {MPI_UNSIGNED_CHAR, MPI_UNSIGNED_SHORT, MPI_UNSIGNED, MPI_UNSIGNED_LONG,
                                  MPI_UNSIGNED_LONG_LONG, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T};
    for (MPI_Datatype s : sints)
        if (t == s) return int_kind((size_t)sz, true);
    for (MPI_Datatype u : uints)
        if (t == u) return int_kind((size_t)sz, false);
    if (t == MPI_BYTE) return {NM_OS_U8, BITS};
    if (t == MPI_C_BOOL && sz == 1) return {NM_OS_U8, LOGIC};
    if (t == MPI_LOGICAL && sz == 4) return {NM_OS_I32, LOGIC};
    if ((t == MPI_FLOAT || t == MPI_REAL || t == MPI_REAL4) && sz == 4) return {NM_OS_F32, ARITH};
    if ((t == MPI_DOUBLE || t == MPI_DOUBLE_PRECISION || t == MPI_REAL8) && sz == 8) return {NM_OS_F64, ARITH};
    if (t == MPI_FLOAT_INT && sz == 8) return {NM_OS_PAIR_F32, LOC};
    if (t == MPI_DOUBLE_INT && sz == 12) return {NM_OS_PAIR_F64, LOC};
    if (t == MPI_LONG_INT && sz == 12) return {NM_OS_PAIR_I64, LOC};
    if (t == MPI_2INT && sz == 8) return {NM_OS_PAIR_I32, LOC};
    if (t == MPI_SHORT_INT && sz == 6) return {NM_OS_PAIR_I16, LOC};
    return {-1, 0};
}

int op_of(MPI_Op op)
{
    const MPI_Op ops[NM_OS_NOPS] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR,
                                    MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
    for (int i = 0; i < NM_OS_NOPS; i++)
        if (op == ops[i]) return i;
    return -1;
}

}  // namespace

bool oneshot_reduction(const DtypeInfo *d, MPI_Op op, int *kind, int *opi)
{
    if (!d || d->os_kind < 0 || !d->basic_size || d->size % d->basic_size) return false;
    int o = op_of(op);
    if (o < 0 || !(d->os_ops & (1u << o))) return false;
    *kind = d->os_kind;
    *opi = o;
    return true;
}

void oneshot_kind(MPI_Datatype basic, int *kind, unsigned *ops)
{
    Kind k = kind_of(basic);
    *kind = k.kind;
    *ops = k.ops;
}

// ---- the window --------------------------------------------------------------------------------
void oneshot_release(OneshotWindow *w)
{
    if (!w) return;
    ipc_unshare(w->ctx, w->n, w->rank, w->win);
    DeviceGuard g(w->ctx);
    if (w->win[w->rank]) cu.cuMemFree(w->win[w->rank]);
    if (w->abort_host) cu.cuMemFreeHost((void *)w->abort_host);
    delete w;
}

void oneshot_abort(OneshotWindow *w)
{
    if (w && w->abort_host) *w->abort_host = 1;
}

void oneshot_setup(ProcessGroup *pg, MPI_Comm comm)
{
    const int n = pg->size();
    // rank-consistent preconditions (the size, the settings, the library): no collective at all
    if (!nm_cfg.ONESHOT || nm_cfg.ONESHOT_MAX == 0 || !kernels_built() || n < 2 || n > NM_OS_MAX_RANKS) return;
    std::string why;
    OneshotWindow *w = new OneshotWindow;
    w->ctx = pg->ctx();
    w->n = n;
    w->rank = pg->rank();
    w->slot_bytes = ((size_t)nm_cfg.ONESHOT_MAX + 255) / 256 * 256;
    w->flags_off = 2 * (size_t)n * w->slot_bytes;
    w->bytes = w->flags_off + 2 * (size_t)n * NM_OS_MAX_BLOCKS * 8 + 256;  // flags, done counter
    CUdeviceptr mine = 0;
    {
        DeviceGuard g(pg->ctx());
        void *ab = nullptr;
        CUresult r;
        if (!(w->fn = kernels(pg->ctx(), &why))) {
        } else if ((r = cu.cuMemAlloc(&w->win[w->rank], w->bytes)) != CUDA_SUCCESS) {
            why = std::string("cuMemAlloc: ") + cuda_errstr(r);
        } else if ((r = cu.cuMemsetD8Async(w->win[w->rank], 0, w->bytes, pg->stream())) != CUDA_SUCCESS ||
                   (r = cu.cuStreamSynchronize(pg->stream())) != CUDA_SUCCESS) {
            why = std::string("clearing the window: ") + cuda_errstr(r);
        } else if ((r = cu.cuMemHostAlloc(&ab, sizeof(unsigned), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS) {
            why = std::string("cuMemHostAlloc: ") + cuda_errstr(r);
        } else if ((w->abort_host = (volatile unsigned *)ab, *w->abort_host = 0,
                    r = cu.cuMemHostGetDevicePointer(&w->abort_dev, ab, 0)) != CUDA_SUCCESS) {
            why = std::string("cuMemHostGetDevicePointer: ") + cuda_errstr(r);
        } else {
            mine = w->win[w->rank];
        }
    }
    const CUdeviceptr own = w->win[w->rank];
    const bool ok = ipc_share(comm, n, w->rank, pg->ctx(), mine, 0, w->win, nullptr, &why);
    w->win[w->rank] = own;  // (freed by oneshot_release either way)
    if (!ok) {
        NM_DEBUG(INIT, "%s: no one-shot window: %s", pg->describe().c_str(), why.c_str());
        oneshot_release(w);
        return;
    }
    NM_DEBUG(INIT, "%s: one-shot window of %zu bytes mapped on %d ranks", pg->describe().c_str(), w->bytes, n);
    pg->set_oneshot(w);
}

// the kernels' collective for an op kind, or -1
static int coll_of(int kind)
{
    switch (kind) {
    case NM_OPK_ALLREDUCE: return NM_OS_ALLREDUCE;
    case NM_OPK_REDUCE: return NM_OS_REDUCE;
    case NM_OPK_REDUCE_SCATTER_BLOCK: return NM_OS_REDUCE_SCATTER_BLOCK;
    case NM_OPK_BCAST: return NM_OS_BCAST;
    case NM_OPK_ALLGATHER: return NM_OS_ALLGATHER;
    default: return -1;
    }
}

bool oneshot_fits(const ProcessGroup *pg, int kind, const DtypeInfo *d, MPI_Op op, long long count)
{
    const OneshotWindow *w = pg ? pg->oneshot() : nullptr;
    const int coll = coll_of(kind);
    int ek, opi;
    if (!w || coll < 0 || count < 1 || !d) return false;
    if (coll <= NM_OS_REDUCE_SCATTER_BLOCK && !oneshot_reduction(d, op, &ek, &opi)) return false;
    // the bytes one rank puts into one slot (a block of the result for Reduce_scatter_block)
    const unsigned long long bytes = (unsigned long long)count * d->size;
    return bytes <= w->slot_bytes && bytes <= (unsigned long long)nm_cfg.ONESHOT_MAX;
}

nm_status_t oneshot_run(NcclCall &c)
{
    Op &op = c.op;
    OneshotWindow *w = c.pg.oneshot();
    const int coll = coll_of(op.o.kind);
    if (!w || coll < 0) return NM_ERR_UNSUPPORTED;
    nm_os_args_t a;
    memset(&a, 0, sizeof(a));
    const size_t cnt = (size_t)op.o.rcount;
    const int rank = w->rank, n = w->n;
    int fn = NM_OS_NTYPES;  // nm_os_move
    const char *src = nullptr;
    char *dst = nullptr;
    if (coll <= NM_OS_REDUCE_SCATTER_BLOCK) {
        const DtypeInfo *d = &op.info(SEG_RECV);
        if (!oneshot_reduction(d, op.o.op, &fn, &a.op)) return NM_ERR_UNSUPPORTED;
        a.esize = (int)d->basic_size;
        a.count = cnt * d->size / d->basic_size;
        if (coll == NM_OS_REDUCE_SCATTER_BLOCK) {  // as the NCCL body: in place, rank r's result goes to block 0
            if (op.inplace) {
                char *whole = c.seg(SEG_RECV, BUF_INOUT, 0, cnt * n);
                src = whole;
                dst = rank == 0 ? whole : (char *)c.scratch(c.bytes(SEG_RECV, cnt));
                if (rank != 0 && dst) c.post_d2d(whole, dst, c.bytes(SEG_RECV, cnt));
            } else {
                src = c.seg(SEG_SEND, BUF_IN, 0, cnt * n);
                dst = c.seg(SEG_RECV, BUF_OUT, 0, cnt);
            }
        } else if (coll == NM_OS_REDUCE && !op.root) {
            src = c.seg(SEG_SEND, BUF_IN, 0, cnt);
        } else {
            dst = c.seg(SEG_RECV, op.inplace ? BUF_INOUT : BUF_OUT, 0, cnt);
            src = op.inplace ? dst : c.seg(SEG_SEND, BUF_IN, 0, cnt);
        }
    } else if (coll == NM_OS_BCAST) {
        dst = c.seg(SEG_RECV, op.root ? BUF_IN : BUF_OUT, 0, cnt);
        src = dst;
        a.esize = 1;
        a.count = c.bytes(SEG_RECV, cnt);
    } else {  // Allgather
        const size_t blk = c.bytes(SEG_RECV, cnt);
        dst = c.seg(SEG_RECV, op.inplace ? BUF_INOUT : BUF_OUT, 0, cnt * n);
        src = op.inplace ? dst + rank * blk : c.seg(SEG_SEND, BUF_IN, 0, (size_t)op.o.scount);
        a.esize = 1;
        a.count = blk;
    }
    if (c.st != NM_OK) return c.st;
    for (int q = 0; q < n; q++) a.win[q] = (char *)w->win[q];
    a.in = src;
    a.out = dst;
    a.seq = ++w->seq;
    a.slot_bytes = w->slot_bytes;
    a.flags_off = w->flags_off;
    a.abort_word = (volatile unsigned *)w->abort_dev;
    a.n = n;
    a.rank = rank;
    a.coll = coll;
    a.root = op.o.root;
    // alone in its launch and nothing to copy after it: the kernel reports its own completion
    if (c.alone && op.post.empty() && op.post_first.empty()) {
        CUdeviceptr f = 0;
        op.kdone = c.pg.flag_reserve(c.s, &op.kdone_ticket, &f);
        a.done_flag = (unsigned long long *)f;
        a.done_ticket = op.kdone_ticket;
    }
    // blocks: a function of the bytes, the same on every rank
    const size_t bytes = (size_t)a.count * (size_t)a.esize;
    unsigned blocks = (unsigned)((bytes + 2047) / 2048);
    blocks = blocks < 1 ? 1 : blocks > NM_OS_MAX_BLOCKS ? NM_OS_MAX_BLOCKS : blocks;
    void *params[] = {&a};
    NM_CU_CHECK(cu.cuLaunchKernel(w->fn[fn], blocks, 1, 1, NM_OS_THREADS, 1, 1, 0, c.s, params, nullptr),
                return NM_ERR_CUDA);
    return NM_OK;
}

}  // namespace ncclmpi
