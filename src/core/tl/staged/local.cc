// ncclmpi: local calls on device buffers, staged (the STAGE rows of mpi_api.def: MPI_Pack,
// MPI_Unpack and their _external forms, MPI_Reduce_local, the MPI-IO data calls).
//
// These calls move data between the caller's buffers and a local object (a packing buffer, a
// file); no peer's memory kind enters the decision, so each rank stages on its own: a rank whose
// buffer is device memory copies it into a pinned host shadow (after the application's work on
// the legacy stream), the real MPI runs on the shadow, and what the call wrote goes back. A read
// into a contiguous buffer gets back only what its status counts; any other buffer the call writes
// is copied in first too. Either way the bytes it leaves alone (a short read at the end of a file,
// a datatype's gaps, packing space beyond the position) come back unchanged. A
// collective file call (MPI_File_write_all, ...) is then the real MPI's collective over host
// memory on every rank, whichever ranks staged.
#include <mpi.h>

#include <map>
#include <mutex>

#include "core/cuda/cuda_api.h"
#include "core/cuda/memkind.h"
#include "core/dtype/dtype.h"
#include "core/engine/task.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/watchdog.h"

namespace ncclmpi {
namespace {

// One staged call, from nm_stage_local to nm_stage_local_done (the wrapper's token).
struct Local {
    nm_op_t o;        // the description stage_in works on (its sbuf/rbuf become the shadows)
    Stage *s = nullptr;
    int how = 0;
    bool watched = false;  // the wait in the real call is watched (NM_STAGE_WAITS)
    void *sh = nullptr;  // a split collective's shadow, which its _end passes again
    MPI_Status status;   // the real call's, where the caller ignores it (a read counts what it read)
};

// Split collectives in progress, by file: MPI allows one per file handle at a time.
std::mutex split_mu;
std::map<MPI_File, Local *> split;

// The real call that follows may wait for the other ranks: the watchdog names it if it does.
int staged(int fn, Local *l, void **tok)
{
    NM_COUNT_ROUTE(fn, NCCLMPI_ROUTE_STAGED);
    if ((l->watched = (l->how & NM_STAGE_WAITS) != 0)) nm_wd_begin_fatal(nm_fn_names[fn], stage_wait_reason, -1);
    *tok = l;
    return NM_STAGE_STAGED;
}

void drop(Local *l)
{
    if (l->s) stage_release(l->s);
    delete l;
}

}  // namespace
}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" int nm_stage_local(int fn, const nm_sbuf_t *b, int n, int how, MPI_File fh, MPI_Comm comm, void **sh,
                              void **tok, MPI_Status **stp, int *rc)
{
    for (int i = 0; i < n; i++) sh[i] = const_cast<void *>(b[i].p);
    if (nm_cfg.DISABLE) return NM_STAGE_HOST;
    if (how & NM_STAGE_END) {  // the shadow its _begin staged (none: the begin was on host memory)
        std::lock_guard<std::mutex> g(split_mu);
        auto it = split.find(fh);
        if (it == split.end()) return NM_STAGE_HOST;
        Local *l = it->second;
        split.erase(it);
        l->how = how;  // (finished by nm_stage_local_done now)
        sh[0] = l->sh;
        if (stp && *stp == MPI_STATUS_IGNORE) *stp = &l->status;
        return staged(fn, l, tok);
    }
    if (!cuda_attached() && !nm_linkmap_refresh()) return NM_STAGE_HOST;
    // b[0] is the descriptor's send side, b[1] its receive side (two buffers: SBUF, RBUF); one
    // buffer is the side its direction says
    BufRef r[2];
    int idx[2], nr = 0;
    for (int i = 0; i < n && i < 2; i++) {
        if (b[i].count == 0 || b[i].p == MPI_IN_PLACE) continue;  // (not significant)
        if (b[i].count < 0) return NM_STAGE_HOST;  // invalid: the real MPI reports it
        MPI_Aint lo = 0, hi = (MPI_Aint)b[i].count;  // without a datatype: bytes
        const DtypeInfo *d = b[i].type != MPI_DATATYPE_NULL ? dtype_info(b[i].type) : nullptr;
        if (b[i].type != MPI_DATATYPE_NULL && !d) return NM_STAGE_HOST;  // (an invalid datatype: likewise)
        if (d) dtype_span(d, 0, b[i].count, &lo, &hi);
        int dev = -1;
        if (hi <= lo || !nm_mem_device((const char *)b[i].p + lo, &dev)) continue;
        CUdevice cd;
        if (dev < 0 && cu.cuCtxGetDevice(&cd) == CUDA_SUCCESS) dev = (int)cd;  // (managed memory)
        BufRef &x = r[nr];
        x = BufRef();
        x.is_recv = n == 2 ? i == 1 : b[i].written != 0;
        x.ptr = const_cast<void *>(b[i].p);
        x.dir = b[i].written ? BUF_INOUT : BUF_IN;
        // a read into a contiguous buffer whose status reaches us: no copy in, and back only what
        // was read (the rest of the buffer is not touched)
        if (b[i].written == 2 && (how & NM_STAGE_COUNTS) && d && d->contig) {
            x.dir = BUF_OUT;
            x.dense = true;
            x.counted = true;
        }
        x.lo = lo;
        x.hi = hi;
        x.kind = NM_MEM_DEVICE;
        x.device = dev;
        idx[nr++] = i;
    }
    if (!nr) return NM_STAGE_HOST;
    if (!cuda_ctx_current(r[0].device)) {  // a device reset (cuda_api.h): no lane made before it is named
        *rc = nm_raise_error(fn, NM_ERR_CUDA, nm_reset_why, comm, fh);
        return NM_STAGE_FAILED;
    }
    if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) nm_flush();  // (the real call may wait)
    Local *l = new Local;
    nm_op_init(&l->o, fn, NM_OPK_NONE, 0);
    l->o.comm = comm;
    l->o.status = stp && *stp != MPI_STATUS_IGNORE ? *stp : &l->status;
    l->how = how;
    const nm_status_t st = stage_in(&l->o, r, nr, &l->s);
    if (st != NM_OK) {
        l->s = nullptr;  // (stage_in released it)
        drop(l);
        const char *why = st == NM_ERR_NO_MEM ? "no pinned host memory to stage the device buffer through"
                                              : "copying the device buffer to the host failed";
        *rc = nm_raise_error(fn, st, why, comm, fh);
        return NM_STAGE_FAILED;
    }
    for (int k = 0; k < nr; k++) sh[idx[k]] = r[k].is_recv ? l->o.rbuf : const_cast<void *>(l->o.sbuf);
    l->sh = sh[0];
    if (stp) *stp = l->o.status;
    NM_TRACE(CALL, "MPI_%s -> staged (device buffers through host memory)", nm_fn_names[fn]);
    return staged(fn, l, tok);
}

extern "C" int nm_stage_local_done(int fn, void *tok, int rc, MPI_Status *status, MPI_Request *req, MPI_File fh,
                                   MPI_Comm comm)
{
    Local *l = static_cast<Local *>(tok);
    if (l->watched) nm_wd_end();
    l->watched = false;
    if (rc != MPI_SUCCESS) {  // the real MPI reported it; nothing was written
        drop(l);
        return rc;
    }
    if (l->how & NM_STAGE_BEGIN) {  // the shadow lives until the _end
        std::lock_guard<std::mutex> g(split_mu);
        split[fh] = l;
        return rc;
    }
    if (req) {  // a nonblocking call: copied back when the real request completes
        Task *t = Task::get(&l->o);
        t->set_inner(*req, l->s);  // (the task releases the stage)
        l->s = nullptr;
        drop(l);
        return t->publish(req);
    }
    const nm_status_t st = stage_finish(l->s, status);
    drop(l);
    return st == NM_OK ? rc : nm_raise_error(fn, st, "copying the result back to the device failed", comm, fh);
}
