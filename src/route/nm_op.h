/* ncclmpi: the one description of an MPI operation.
 *
 * Every data-moving wrapper fills an nm_op_t (generated from mpi_api.def), and everything after
 * that (routing, NCCL, staging, tasks) reads only this struct. Blocking, nonblocking and
 * persistent forms of a call share its op kind and differ in flags.
 */
#ifndef NM_ROUTE_OP_H
#define NM_ROUTE_OP_H
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NM_OPK_NONE = 0,
    /* collectives */
    NM_OPK_ALLREDUCE, NM_OPK_REDUCE, NM_OPK_BCAST, NM_OPK_ALLGATHER, NM_OPK_ALLGATHERV,
    NM_OPK_ALLTOALL, NM_OPK_ALLTOALLV, NM_OPK_ALLTOALLW, NM_OPK_REDUCE_SCATTER,
    NM_OPK_REDUCE_SCATTER_BLOCK, NM_OPK_GATHER, NM_OPK_GATHERV, NM_OPK_SCATTER, NM_OPK_SCATTERV,
    NM_OPK_SCAN, NM_OPK_EXSCAN, NM_OPK_BARRIER,
    /* point-to-point */
    NM_OPK_SEND, NM_OPK_RECV, NM_OPK_SENDRECV, NM_OPK_SENDRECV_REPLACE, NM_OPK_MRECV, NM_OPK_PROBE,
    NM_OPK_START,
    /* completion, requests, communicators */
    NM_OPK_WAIT, NM_OPK_WAITALL, NM_OPK_WAITANY, NM_OPK_WAITSOME, NM_OPK_TEST, NM_OPK_REQUEST,
    NM_OPK_COMM,
    NM_OPK_COUNT
} nm_opkind_t;

enum {
    NM_OPF_NB = 1u << 0,      /* nonblocking (I-form): returns a request */
    NM_OPF_PERS = 1u << 1,    /* persistent (_init form) */
    NM_OPF_INPLACE = 1u << 2, /* MPI_IN_PLACE was given */
    NM_OPF_STAGED = 1u << 3,  /* buffers were swapped for host shadows; nm_leave copies back */
};

struct nm_stage;

typedef struct nm_op {
    uint16_t fn;    /* nm_fn_t: which entry point */
    uint8_t kind;   /* nm_opkind_t */
    uint8_t flags;  /* NM_OPF_* */
    const void *sbuf;
    void *rbuf;
    int scount, rcount;
    const int *scounts, *sdispls, *rcounts, *rdispls;
    MPI_Datatype stype, rtype;
    const MPI_Datatype *stypes, *rtypes;
    MPI_Op op;
    int root;
    int peer, rpeer; /* dest / source */
    int tag, rtag;
    MPI_Comm comm;
    MPI_Request *req;
    MPI_Status *status;
    MPI_Message *msg;
    struct nm_stage *stage; /* staging state between nm_enter and nm_leave */
} nm_op_t;

static inline void nm_op_init(nm_op_t *o, int fn, int kind, unsigned flags)
{
    memset(o, 0, sizeof(*o));
    o->fn = (uint16_t)fn;
    o->kind = (uint8_t)kind;
    o->flags = (uint8_t)flags;
    o->stype = o->rtype = MPI_DATATYPE_NULL;
    o->op = MPI_OP_NULL;
    o->comm = MPI_COMM_NULL;
}

const char *nm_opkind_name(int kind);
static inline int nm_opkind_is_coll(int k) { return k >= NM_OPK_ALLREDUCE && k <= NM_OPK_BARRIER; }
static inline int nm_opkind_is_reduction(int k)
{
    return k == NM_OPK_ALLREDUCE || k == NM_OPK_REDUCE || k == NM_OPK_REDUCE_SCATTER ||
           k == NM_OPK_REDUCE_SCATTER_BLOCK || k == NM_OPK_SCAN || k == NM_OPK_EXSCAN;
}

#ifdef __cplusplus
}
#endif
#endif
