/* ncclmpi: the routing decision. Pure: reads only its input. */
#include "route/route.h"
#include "route/nm_op.h"

static nm_decision_t mk(ncclmpi_route_t r, nm_why_t w)
{
    nm_decision_t d = {r, w};
    return d;
}

nm_decision_t nm_route(const nm_route_in_t *in)
{
    if (in->disable || !in->any_device) return mk(NCCLMPI_ROUTE_HOST, in->disable ? NM_WHY_DISABLED : NM_WHY_HOST_BUFFERS);
    if (in->devices_differ) return mk(NCCLMPI_ROUTE_ERROR, NM_WHY_DEVICES);
    if (in->flags & NM_OPF_PERS) return mk(NCCLMPI_ROUTE_ERROR, NM_WHY_PERSISTENT);
    if (in->force_staged) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_FORCED);

    switch (in->kind) {
    case NM_OPK_SCAN:
    case NM_OPK_EXSCAN:
    case NM_OPK_ALLTOALLW:
        return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_KIND);
    case NM_OPK_SEND:
    case NM_OPK_RECV:
    case NM_OPK_SENDRECV:
    case NM_OPK_SENDRECV_REPLACE:
    case NM_OPK_MRECV:
        return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_P2P);
    default:
        break;
    }
    if (!nm_opkind_is_coll(in->kind)) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_KIND);
    if (in->any_host) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_MIXED);
    if (!in->comm_nccl) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_COMM);
    if (nm_opkind_is_reduction(in->kind)) {
        if (in->nccl_op == NM_UNSUPPORTED) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_OP);
        if (in->nccl_type == NM_UNSUPPORTED) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_TYPE);
        return mk(NCCLMPI_ROUTE_NCCL, NM_WHY_NCCL);
    }
    /* data movement: bytes, when both sides are contiguous and agree in size */
    if (!in->s_contig || !in->r_contig) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_NONCONTIG);
    if (!in->bytes_match) return mk(NCCLMPI_ROUTE_STAGED, NM_WHY_SIGNATURE);
    return mk(NCCLMPI_ROUTE_NCCL, NM_WHY_NCCL);
}

const char *nm_why_str(nm_why_t why)
{
    static const char *const s[NM_WHY_COUNT_] = {
        [NM_WHY_HOST_BUFFERS] = "host buffers",
        [NM_WHY_DISABLED] = "NCCLMPI_DISABLE=1",
        [NM_WHY_NCCL] = "NCCL",
        [NM_WHY_FORCED] = "NCCLMPI_FORCE_STAGED=1",
        [NM_WHY_OP] = "op not in NCCL",
        [NM_WHY_TYPE] = "datatype not in NCCL for reductions",
        [NM_WHY_NONCONTIG] = "non-contiguous datatype",
        [NM_WHY_COMM] = "communicator cannot use NCCL",
        [NM_WHY_MIXED] = "host and device buffers mixed",
        [NM_WHY_KIND] = "operation has no NCCL path",
        [NM_WHY_P2P] = "point-to-point on device buffers is staged",
        [NM_WHY_PERSISTENT] = "persistent requests on device buffers are not supported",
        [NM_WHY_DEVICES] = "buffers on different devices",
        [NM_WHY_SIGNATURE] = "send and receive sizes differ",
    };
    return (why >= 0 && why < NM_WHY_COUNT_ && s[why]) ? s[why] : "?";
}

const char *nm_route_str(ncclmpi_route_t r)
{
    switch (r) {
    case NCCLMPI_ROUTE_HOST: return "host";
    case NCCLMPI_ROUTE_NCCL: return "nccl";
    case NCCLMPI_ROUTE_STAGED: return "staged";
    case NCCLMPI_ROUTE_ERROR: return "error";
    default: return "?";
    }
}

const char *nm_opkind_name(int kind)
{
    static const char *const s[NM_OPK_COUNT] = {
        [NM_OPK_NONE] = "none", [NM_OPK_ALLREDUCE] = "allreduce", [NM_OPK_REDUCE] = "reduce",
        [NM_OPK_BCAST] = "bcast", [NM_OPK_ALLGATHER] = "allgather", [NM_OPK_ALLGATHERV] = "allgatherv",
        [NM_OPK_ALLTOALL] = "alltoall", [NM_OPK_ALLTOALLV] = "alltoallv", [NM_OPK_ALLTOALLW] = "alltoallw",
        [NM_OPK_REDUCE_SCATTER] = "reduce_scatter", [NM_OPK_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
        [NM_OPK_GATHER] = "gather", [NM_OPK_GATHERV] = "gatherv", [NM_OPK_SCATTER] = "scatter",
        [NM_OPK_SCATTERV] = "scatterv", [NM_OPK_SCAN] = "scan", [NM_OPK_EXSCAN] = "exscan",
        [NM_OPK_BARRIER] = "barrier", [NM_OPK_SEND] = "send", [NM_OPK_RECV] = "recv",
        [NM_OPK_SENDRECV] = "sendrecv", [NM_OPK_SENDRECV_REPLACE] = "sendrecv_replace",
        [NM_OPK_MRECV] = "mrecv", [NM_OPK_PROBE] = "probe", [NM_OPK_START] = "start",
        [NM_OPK_WAIT] = "wait", [NM_OPK_WAITALL] = "waitall", [NM_OPK_WAITANY] = "waitany",
        [NM_OPK_WAITSOME] = "waitsome", [NM_OPK_TEST] = "test", [NM_OPK_REQUEST] = "request",
        [NM_OPK_COMM] = "comm"};
    return (kind >= 0 && kind < NM_OPK_COUNT && s[kind]) ? s[kind] : "?";
}
