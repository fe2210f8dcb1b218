// ncclmpi: a blocking device MPI_Sendrecv to the rank itself as one device copy (self_copy.h).
#include "core/tl/p2p/self_copy.h"

#include "core/comm/comm_state.h"
#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "core/dtype/dense.h"
#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/staged/staging.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

static bool on_device(const BufRef &r) { return r.kind == NM_MEM_DEVICE || r.kind == NM_MEM_MANAGED; }

void p2p_note_self_send(const nm_op_t *, const OpCtx &x)
{
    if (x.cs) x.cs->self_sent.store(true, std::memory_order_relaxed);
}

bool p2p_self_sendrecv(nm_op_t *o, const OpCtx &x, const BufRef *b, int nb, nm_status_t *st)
{
    const bool replace = o->kind == NM_OPK_SENDRECV_REPLACE;
    // the call's send goes to the real MPI after all
    auto real = [&]() {
        if (p2p_sends_to_self(o, x)) p2p_note_self_send(o, x);
        return false;
    };
    if (!nm_cfg.P2P_SELF_COPY || !(o->kind == NM_OPK_SENDRECV ? nb == 2 && x.sd : replace && nb == 1) || !x.rd)
        return real();
    nm_self_in_t in{};
    in.kind = o->kind;
    in.flags = o->flags;
    in.thread_multiple = nm_thread_multiple;
    in.inter = x.inter;
    in.rank = x.rank;
    in.size = x.size;
    in.dest = o->peer;
    in.source = o->rpeer;
    in.source_any = o->rpeer == MPI_ANY_SOURCE;
    in.tag_any = o->rtag == MPI_ANY_TAG;
    in.stag = o->tag;
    in.rtag = o->rtag;
    in.device = on_device(b[0]) && (replace || (on_device(b[1]) && b[0].device == b[1].device));
    in.contig = !replace && x.sd->contig && x.rd->contig && b[0].dense && b[1].dense;
    in.rbytes = (unsigned long long)o->rcount * x.rd->size;
    in.sbytes = replace ? in.rbytes : (unsigned long long)o->scount * x.sd->size;
    in.held = env_holds_messages();
    in.self_sent = x.cs && x.cs->self_sent.load(std::memory_order_relaxed);
    if (!nm_p2p_self_copy(&in)) return real();
    // a message already pending for the receive (an earlier send to itself) is its to take; two
    // probes (route.h: a probe finds a sent message only eventually; MPICH's first one moves it)
    int pending = 0;
    // (a revoked communicator: the real MPI's call reports it)
    for (int k = 0; k < 2 && !pending; k++)
        if (comm_revoked(o->comm) || PMPI_Iprobe(x.rank, o->rtag, o->comm, &pending, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return real();
    if (pending) return real();
    *st = NM_OK;
    if (in.sbytes && !replace) {  // (replace: the buffer already holds what it receives)
        // after the application's earlier work on the legacy stream of the buffers' device (the
        // send buffer's data), and waited for: the receive buffer is the caller's when the call
        // returns. In that device's context, as the staged path copies: the calling thread may
        // have none current (MPI_THREAD_FUNNELED, the CUDA work on other threads).
        Device *d = device_get(b[0].device);
        DeviceGuard g(d ? d->ctx : nullptr);
        if (cu.cuMemcpyAsync((CUdeviceptr)b[1].first(), (CUdeviceptr)b[0].first(), (size_t)in.sbytes, CU_STREAM_LEGACY) !=
            CUDA_SUCCESS)
            *st = NM_ERR_CUDA;
        else
            *st = sync_legacy();
    }
    if (*st == NM_OK && o->status && o->status != MPI_STATUS_IGNORE) {
        o->status->MPI_SOURCE = x.rank;
        o->status->MPI_TAG = o->tag;
        PMPI_Status_set_elements_x(o->status, MPI_BYTE, (MPI_Count)in.sbytes);
        PMPI_Status_set_cancelled(o->status, 0);
    }
    NM_TRACE(P2P, "MPI_Sendrecv to itself: %llu bytes copied on the device", in.sbytes);
    return true;
}

}  // namespace ncclmpi
