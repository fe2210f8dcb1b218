/* ncclmpi: the staged route's path decisions (route.h, "the staged route's own paths"). Pure: reads
 * only its input; test/unit/test_route.c checks it. */
#include <limits.h>

#include "route/nm_op.h"
#include "route/route.h"

int nm_int_fits(unsigned long long n, int *out)
{
    if (n > (unsigned long long)INT_MAX) return 0;
    if (out) *out = (int)n;
    return 1;
}

long long nm_prefix_elems(long long count, unsigned long long esize, unsigned long long need)
{
    if (count <= 0 || esize == 0) return count > 0 ? count : 0;
    const unsigned long long k = need / esize + (need % esize != 0);
    return k < (unsigned long long)count ? (long long)k : count;
}

int nm_piece_elems(unsigned long long esize, unsigned long long max_bytes)
{
    const unsigned long long k = esize ? max_bytes / esize : max_bytes;
    return k == 0 ? 1 : k > (unsigned long long)INT_MAX ? INT_MAX : (int)k;
}

nm_pipe_t nm_stage_pipeline(const nm_pipe_in_t *in)
{
    nm_pipe_t p = {0, 0, 0, 0, 0, 0};
    if ((in->flags & (NM_OPF_NB | NM_OPF_PERS)) || in->agree || in->inter || !in->type_known) return p;
    if (!(nm_opk(in->kind) & NM_KF_ELEM) || in->count <= 0 || in->esize == 0 || in->chunk == 0) return p;
    p.bytes = in->kind == NM_OPK_BCAST;
    /* a reduction's op gets whole elements of the caller's datatype, which must then be dense */
    if (!p.bytes && !in->contig) return p;
    const unsigned long long count = (unsigned long long)in->count;
    if (count > ~0ULL / in->esize) return p; /* (no such message fits memory) */
    const unsigned long long total = count * in->esize;
    if (in->chunk > total / 2 || total - in->chunk <= in->chunk) return p; /* two chunks or fewer: staged whole */
    p.unit = p.bytes ? 1 : in->esize;
    p.units = p.bytes ? total : count;
    p.per = in->chunk / p.unit ? in->chunk / p.unit : 1;
    if (p.per > (unsigned long long)INT_MAX) p.per = (unsigned long long)INT_MAX;
    p.nchunks = (p.units + p.per - 1) / p.per;
    p.applies = 1;
    return p;
}

int nm_shared_applies(const nm_shared_in_t *in)
{
    if (!in->window || in->inter || (in->flags & (NM_OPF_NB | NM_OPF_PERS)) || in->agree || in->force_staged)
        return 0;
    return in->shape_ok && in->total >= in->min_bytes;
}

int nm_env_send_defers(const nm_defer_in_t *in)
{
    return in->env_active && in->may_hold && (in->flags & NM_OPF_NB) && in->kind == NM_OPK_SEND &&
           !(in->flags & NM_OPF_PERS) && in->send_mode && in->queue;
}

int nm_p2p_self_copy(const nm_self_in_t *in)
{
    const int replace = in->kind == NM_OPK_SENDRECV_REPLACE;
    if ((in->kind != NM_OPK_SENDRECV && !replace) || (in->flags & (NM_OPF_NB | NM_OPF_PERS)) || in->thread_multiple ||
        in->inter)
        return 0;
    if (in->dest != in->rank || !(in->source_any ? in->size == 1 : in->source == in->rank)) return 0;
    if (!in->tag_any && in->rtag != in->stag) return 0;
    if (!in->device || in->held || in->self_sent) return 0;
    return replace || (in->contig && in->sbytes <= in->rbytes);  /* (replace: the buffer keeps what it sends) */
}

int nm_launch_rendezvous(int setting, int any_thread_multiple)
{
    switch (setting) {
    case NM_RDV_ON: return 1;
    case NM_RDV_OFF: return 0;
    default: return any_thread_multiple != 0;
    }
}

int nm_turn_applies(const nm_route_in_t *in, nm_decision_t d)
{
    if (in->flags & (NM_OPF_NB | NM_OPF_PERS)) return 0;
    if (!(nm_opk(in->kind) & NM_KF_COLL) || in->cap == NM_CAP_INTER) return 0;
    /* a communicator of MPIX streams: its MPIX_*_enqueue calls never wait for the peers on the
     * host (a turn's agreement would), and a rank's plain call there matches the others'
     * enqueued ones; the application orders its streams' work, as with NCCL itself */
    if (in->stream_comm) return 0;
    if (d.act & (NM_ACT_CREATE | NM_ACT_CONNECT)) return 1;
    return (d.route == NCCLMPI_ROUTE_NCCL || d.route == NCCLMPI_ROUTE_ONESHOT) && !(d.act & NM_ACT_CARRIER);
}

int nm_oneshot_keeps(int group_size, int reduction, int nccl_type_ok, int nccl_op_ok)
{
    if (group_size <= 1) return 1;
    return reduction && !(nccl_type_ok && nccl_op_ok);
}
