/* ncclmpi: the one description of an MPI operation, and the one table of operation kinds.
 *
 * Every data-moving wrapper fills an nm_op_t (generated from mpi_api.def), and everything after
 * that (routing, NCCL, staging, tasks) reads only this struct. Blocking, nonblocking and
 * persistent forms of a call share its op kind and differ in flags.
 *
 * NM_OPK_TABLE has one row per kind with the facts every layer needs (is it a collective, a
 * reduction, rooted, can NCCL run it, can a rank have nothing to contribute). The enum, the names
 * and the route's kind facts come from it; src/core/op_table.cc builds its rows (buffers, NCCL
 * body) from the same list, so a kind without its row does not compile.
 */
#ifndef NM_ROUTE_OP_H
#define NM_ROUTE_OP_H
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif

/* kind facts */
enum {
    NM_KF_COLL = 1u << 0,   /* collective: every rank of the communicator calls it */
    NM_KF_RED = 1u << 1,    /* reduction: op and the signature's basic type matter */
    NM_KF_ROOTED = 1u << 2, /* has a root */
    NM_KF_NCCL = 1u << 3,   /* NCCL can run it (with a mapped op/type for reductions) */
    NM_KF_AMBIG = 1u << 4,  /* a rank may have no data while others have some (per-rank counts):
                               such a rank cannot know the others' memory kind */
    NM_KF_ELEM = 1u << 5,   /* elementwise over one buffer (staged pipelining applies) */
    NM_KF_P2P = 1u << 6,    /* point-to-point */
    NM_KF_V = 1u << 7,      /* per-rank counts and displacements */
    NM_KF_NEIGH = 1u << 8,  /* neighbourhood collective: one block per neighbour of the topology
                               (not NM_KF_COLL: device buffers are staged, host ones go to the real
                               MPI, so every rank's route ends in the same real-MPI call) */
    NM_KF_RECV = 1u << 9,   /* receives a point-to-point message (which may be an envelope) */
    NM_KF_SENDRECV = 1u << 10, /* its NCCL body is sends and receives (NCCL's own AlltoAll, Gather
                                  and Scatter too), which connect per peer at first use */
};

/*   X(KIND, name, facts) */
#define NM_OPK_TABLE(X)                                                                                    \
    X(NONE, none, 0)                                                                                       \
    X(ALLREDUCE, allreduce, NM_KF_COLL | NM_KF_RED | NM_KF_NCCL | NM_KF_ELEM)                              \
    X(REDUCE, reduce, NM_KF_COLL | NM_KF_RED | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_ELEM)                     \
    X(BCAST, bcast, NM_KF_COLL | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_ELEM)                                   \
    X(ALLGATHER, allgather, NM_KF_COLL | NM_KF_NCCL)                                                       \
    X(ALLGATHERV, allgatherv, NM_KF_COLL | NM_KF_NCCL | NM_KF_V | NM_KF_SENDRECV)                          \
    X(ALLTOALL, alltoall, NM_KF_COLL | NM_KF_NCCL | NM_KF_SENDRECV)                                        \
    X(ALLTOALLV, alltoallv, NM_KF_COLL | NM_KF_NCCL | NM_KF_AMBIG | NM_KF_V | NM_KF_SENDRECV)              \
    X(ALLTOALLW, alltoallw, NM_KF_COLL | NM_KF_AMBIG | NM_KF_V)                                            \
    X(REDUCE_SCATTER, reduce_scatter, NM_KF_COLL | NM_KF_RED | NM_KF_NCCL)                                 \
    X(REDUCE_SCATTER_BLOCK, reduce_scatter_block, NM_KF_COLL | NM_KF_RED | NM_KF_NCCL)                     \
    X(GATHER, gather, NM_KF_COLL | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_SENDRECV)                             \
    X(GATHERV, gatherv, NM_KF_COLL | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_AMBIG | NM_KF_V | NM_KF_SENDRECV)   \
    X(SCATTER, scatter, NM_KF_COLL | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_SENDRECV)                           \
    X(SCATTERV, scatterv, NM_KF_COLL | NM_KF_ROOTED | NM_KF_NCCL | NM_KF_AMBIG | NM_KF_V | NM_KF_SENDRECV) \
    X(SCAN, scan, NM_KF_COLL | NM_KF_RED | NM_KF_ELEM)                                                     \
    X(EXSCAN, exscan, NM_KF_COLL | NM_KF_RED)                                                              \
    X(BARRIER, barrier, NM_KF_COLL)                                                                        \
    X(NEIGHBOR_ALLGATHER, neighbor_allgather, NM_KF_NEIGH)                                                 \
    X(NEIGHBOR_ALLGATHERV, neighbor_allgatherv, NM_KF_NEIGH | NM_KF_V)                                     \
    X(NEIGHBOR_ALLTOALL, neighbor_alltoall, NM_KF_NEIGH)                                                   \
    X(NEIGHBOR_ALLTOALLV, neighbor_alltoallv, NM_KF_NEIGH | NM_KF_V)                                       \
    X(NEIGHBOR_ALLTOALLW, neighbor_alltoallw, NM_KF_NEIGH | NM_KF_V)                                       \
    X(SEND, send, NM_KF_P2P)                                                                               \
    X(RECV, recv, NM_KF_P2P | NM_KF_RECV)                                                                  \
    X(SENDRECV, sendrecv, NM_KF_P2P | NM_KF_RECV)                                                          \
    X(SENDRECV_REPLACE, sendrecv_replace, NM_KF_P2P | NM_KF_RECV)                                          \
    X(MRECV, mrecv, NM_KF_P2P | NM_KF_RECV)                                                                \
    X(PROBE, probe, 0)                                                                                     \
    X(START, start, 0)                                                                                     \
    X(WAIT, wait, 0)                                                                                       \
    X(WAITALL, waitall, 0)                                                                                 \
    X(WAITANY, waitany, 0)                                                                                 \
    X(WAITSOME, waitsome, 0)                                                                               \
    X(TEST, test, 0)                                                                                       \
    X(REQUEST, request, 0)                                                                                 \
    X(COMM, comm, 0)                                                                                       \
    X(SYNC, sync, 0)

typedef enum {
#define NM_OPK_ENUM(K, name, facts) NM_OPK_##K,
    NM_OPK_TABLE(NM_OPK_ENUM)
#undef NM_OPK_ENUM
    NM_OPK_COUNT
} nm_opkind_t;

enum {
    NM_OPF_NB = 1u << 0,      /* nonblocking (I-form): returns a request */
    NM_OPF_PERS = 1u << 1,    /* persistent (_init form) */
    NM_OPF_INPLACE = 1u << 2, /* MPI_IN_PLACE was given */
    NM_OPF_STAGED = 1u << 3,  /* buffers were swapped for host shadows, copied back after the real call */
    NM_OPF_DECODE = 1u << 4,  /* a receive that may get an envelope (core/tl/p2p/envelope.h) */
    NM_OPF_DECODE_CALLER = 1u << 5, /* with NM_OPF_DECODE: its decoding state lives in the caller's frame */
    NM_OPF_TASK = 1u << 6,    /* a call ncclmpi runs for itself (NB): its request is a task or the real MPI's own,
                                 never one that only the Wait and Test wrappers complete (own_request_done) */
    NM_OPF_WATCH = 1u << 7,   /* a blocking collective the real MPI runs on this rank's host buffers, under
                                 NCCLMPI_TIMEOUT: its wait there is marked fatal (util/watchdog.h) */
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
    const MPI_Aint *sadispls, *radispls; /* byte displacements (MPI_Neighbor_alltoallw) */
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
    MPI_Info info;  /* the MPI-4 _init forms' info argument */
    struct nm_stage *stage; /* the core's state around its real-MPI call (staged shadows, a decode) */
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

extern const unsigned nm_opkind_facts[NM_OPK_COUNT];
const char *nm_opkind_name(int kind);
static inline unsigned nm_opk(int k) { return k >= 0 && k < NM_OPK_COUNT ? nm_opkind_facts[k] : 0u; }
static inline int nm_opkind_is_coll(int k) { return (nm_opk(k) & NM_KF_COLL) != 0; }
static inline int nm_opkind_is_reduction(int k) { return (nm_opk(k) & NM_KF_RED) != 0; }

#ifdef __cplusplus
}
#endif
#endif
