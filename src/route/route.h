/* ncclmpi: pure routing decisions. No side effects, no GPU, no MPI calls: unit-testable.
 *
 * The rule (doc/design.md, "One route on every rank") reads only facts every rank of the
 * communicator shares: the call and its kind, the op, the basic type of the type signature,
 * whether the shared count is zero, the communicator's agreed state (cap) and the settings
 * (compared across ranks at MPI_Init). The one per-rank input, rank_kind, is the memory kind of
 * the rank's significant bytes; it is the same on every rank as long as ranks pass the same kind
 * of memory (the contract of a CUDA-aware MPI) except for ranks with nothing to contribute
 * (EMPTY), which the rule gives a route compatible with every other rank's (see NM_ACT_CARRIER).
 * Where ranks may pass different kinds, NCCLMPI_AGREE=1 makes blocking collectives vote first
 * (in.vote) and every other collective take a route that works with any mix.
 * Layout (contiguity), local byte counts and pointers are never inputs: a rank whose layout is
 * not dense bytes packs it itself.
 */
#ifndef NM_ROUTE_ROUTE_H
#define NM_ROUTE_ROUTE_H
#include <mpi.h>
#include <stddef.h>
#include "ncclmpi.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NM_MEM_HOST = 0, NM_MEM_DEVICE = 1, NM_MEM_MANAGED = 2, NM_MEM_PINNED = 3 } nm_memkind_t;

#define NM_UNSUPPORTED (-1)

/* What the rank holds in this call: no significant byte, host memory only, or some device
 * memory (a rank with device and host buffers in one call is a device rank). */
typedef enum { NM_RK_EMPTY = 0, NM_RK_HOST = 1, NM_RK_DEVICE = 2 } nm_rank_kind_t;

/* Agreed state of a communicator's NCCL side; the same on every rank of it. */
typedef enum {
    NM_CAP_UNKNOWN = 0, /* no NCCL communicator yet (cost nothing until used) */
    NM_CAP_PENDING,     /* a nonblocking device collective asked for one: made at the next
                           blocking collective on the communicator */
    NM_CAP_READY,       /* NCCL communicator ready */
    NM_CAP_STAGED,      /* agreed at creation: this communicator cannot use NCCL */
    NM_CAP_FAILED,      /* an NCCL operation failed or timed out: device collectives fail */
    NM_CAP_INTER,       /* intercommunicator: staged */
    NM_CAP_COUNT_
} nm_cap_t;

typedef enum {
    NM_WHY_HOST_BUFFERS,  /* every significant buffer is host memory */
    NM_WHY_DISABLED,      /* NCCLMPI_DISABLE=1 */
    NM_WHY_NCCL,          /* NCCL can do it */
    NM_WHY_FORCED,        /* NCCLMPI_FORCE_STAGED=1 */
    NM_WHY_OP,            /* reduction op has no NCCL equivalent */
    NM_WHY_TYPE,          /* datatype has no NCCL equivalent for this reduction */
    NM_WHY_EMPTY,         /* this rank contributes no bytes */
    NM_WHY_COMM,          /* communicator cannot use NCCL (shared GPU, no GPU, no NCCL) */
    NM_WHY_MIXED,         /* NCCLMPI_AGREE: some rank has host buffers */
    NM_WHY_KIND,          /* operation has no NCCL path (scan, exscan, alltoallw) */
    NM_WHY_P2P,           /* point-to-point on device buffers goes through the staged path */
    NM_WHY_PERSISTENT,    /* persistent point-to-point on device buffers: staged at each start */
    NM_WHY_DEVICES,       /* buffers on two different devices in one call: error */
    NM_WHY_INTER,         /* intercommunicator */
    NM_WHY_NOT_YET,       /* no NCCL communicator yet; made at the next blocking collective */
    NM_WHY_FAILED,        /* the communicator's NCCL side failed earlier */
    NM_WHY_AGREE_NB,      /* NCCLMPI_AGREE: nonblocking collectives do not vote: staged */
    NM_WHY_ONESHOT,       /* small reduction the one-shot kernels run */
    NM_WHY_NEIGHBOR,      /* neighbourhood collective on device buffers: staged */
    NM_WHY_PERSISTENT_START, /* persistent collective (MPI-4) on device buffers: each start runs its
                                nonblocking form (nm_pers_coll_restarts) */
    NM_WHY_PEERS,         /* the communicator's sends and receives are not connected yet */
    NM_WHY_THREADS,       /* NCCLMPI_RENDEZVOUS: another thread of some rank's process had NCCL work */
    NM_WHY_COUNT_
} nm_why_t;

/* Actions beside the route. Each is a function of shared facts, so every rank takes it. */
enum {
    NM_ACT_CREATE = 1u << 0,  /* create the NCCL communicator now (a blocking collective:
                                 every rank is here), then route again */
    NM_ACT_PENDING = 1u << 1, /* mark the communicator PENDING */
    NM_ACT_CARRIER = 1u << 2, /* NCCL route of an AMBIG kind: also make the real MPI call with
                                 zero counts, which matches what an EMPTY rank calls */
    NM_ACT_CONNECT = 1u << 3, /* connect the communicator's sends and receives to every peer now
                                 (a blocking collective every rank has data in), then route again */
};

typedef struct nm_route_in {
    int kind;          /* nm_opkind_t */
    unsigned flags;    /* NM_OPF_* */
    int rank_kind;     /* nm_rank_kind_t (per rank; see above) */
    int devices_differ;/* device buffers on more than one device (an erroneous call) */
    int cap;           /* nm_cap_t of the communicator */
    int nccl_type;     /* reductions: NCCL type of the signature's basic type, or NM_UNSUPPORTED */
    int nccl_op;       /* reductions: NCCL op, or NM_UNSUPPORTED */
    int agree;         /* NCCLMPI_AGREE */
    int vote;          /* NCCLMPI_AGREE, blocking collectives: MIN over ranks of nm_route_vote(); -1 none */
    int disable;       /* NCCLMPI_DISABLE */
    int force_staged;  /* NCCLMPI_FORCE_STAGED */
    int oneshot;       /* the one-shot kernels can run this call on the communicator's window
                          (kind, type, op, count, the agreed window, the settings: shared facts) */
    int peers_cold;    /* READY, but NCCL's sends and receives are not connected to every peer
                          (NCCLMPI_CONNECT, larger than NCCLMPI_CONNECT_PEERS): the agreed state of
                          the communicator's NCCL side, changed only by NM_ACT_CONNECT */
    int busy;          /* NCCLMPI_RENDEZVOUS: the ranks' turn found some process with NCCL work of
                          another thread (agreed: MIN over ranks; see nm_turn_applies) */
    int stream_comm;   /* the communicator carries MPIX streams (made by MPIX_Stream_comm_create
                          or duplicated from one): shared; read by nm_turn_applies only */
} nm_route_in_t;

typedef struct nm_decision {
    ncclmpi_route_t route;
    nm_why_t why;
    unsigned act;      /* NM_ACT_* */
} nm_decision_t;

/* Vote values of NCCLMPI_AGREE (the MIN over ranks decides). */
enum { NM_VOTE_STAGE = 0, NM_VOTE_NCCL = 1, NM_VOTE_ANY = 2 };

nm_decision_t nm_route(const nm_route_in_t *in);
/* Whether a persistent collective (MPI-4 MPI_<coll>_init) of this kind on device buffers runs its
 * nonblocking form at each MPI_Start (the application's request completing when that call did):
 * every collective with buffers, neighbourhood collectives included. */
int nm_pers_coll_restarts(int kind);
/* Whether every rank's persistent collective of this kind does so, whatever its buffers: the v/w
 * forms, where a rank may have no data while others have some (NM_KF_AMBIG), and the
 * neighbourhood collectives (a rank's neighbours' buffers are theirs). Such a rank cannot tell
 * that the others' buffers are device memory, and the real MPI matches a persistent collective
 * only with the same persistent collective; the nonblocking forms match on every route ("Ranks
 * with nothing to contribute", doc/design.md; neighbor.h). */
int nm_pers_coll_everywhere(int kind);

/* This rank's vote before an agreed blocking collective. */
int nm_route_vote(const nm_route_in_t *in);
/* The kind, op and type allow NCCL (settings and communicator aside). */
int nm_route_nccl_capable(const nm_route_in_t *in);
const char *nm_why_str(nm_why_t why);
const char *nm_route_str(ncclmpi_route_t r);
const char *nm_cap_str(int cap);

/* ---- NCCLMPI_P2P_ENVELOPE's job-wide decision at MPI_Init ----
 * Every rank fills its vector with nm_env_vote_mine(); the vectors are reduced with MPI_MAX
 * element by element over MPI_COMM_WORLD; nm_env_vote_off() then gives every rank the same answer
 * from its own vector and the maximum: NULL (envelopes on) or why they are off. A value is equal
 * on every rank when its maximum and the maximum of its negation both match this rank's, which
 * each rank can tell alone. auto: the NCCLMPI_P2P_ENVELOPE=auto rule (also a machine with NVIDIA
 * GPUs everywhere and the same CUDA_VISIBLE_DEVICES), else only one node. */
enum { NM_ENV_VOTE_N = 5 };
/* FNV-1a of a string: how a rank's strings (host name, CUDA_VISIBLE_DEVICES, settings) enter
 * such agreements. */
unsigned long long nm_hash_str(const char *s);
/* A value that must be the same on every rank, in two slots of such a MAX reduction: put it
 * (nm_same_put), then nm_same_everywhere(mine, max) tells every rank alike whether it is. */
void nm_same_put(long long slot[2], unsigned long long h);
int nm_same_everywhere(const long long mine[2], const long long max[2]);
void nm_env_vote_mine(long long mine[NM_ENV_VOTE_N], unsigned long long host_hash, unsigned long long gpus_hash,
                      int gpu_node, int autom);
const char *nm_env_vote_off(const long long mine[NM_ENV_VOTE_N], const long long all[NM_ENV_VOTE_N], int autom);

/* ---- device point-to-point on GPUs that ranks share, without MPS ----
 * Without MPS a GPU runs one process's work at a time and switches between processes that both have
 * work queued in time slices: with two ranks on one H200, a device-to-device copy, a kernel or a
 * copy to the device of up to 16 KiB waited 0.14-0.28 ms for the other process's slice, where a
 * copy to the host or a larger one to the device did not (performance.md, "Ranks sharing a GPU").
 * An envelope's payload is copied device to device twice (into the sender's pool, out of it), a
 * copy kernel's batch is a kernel: each may wait a slice, while staging copies to the host and
 * back. So, with NCCLMPI_P2P_ENVELOPE=auto, where the job's `ranks` (all on one node) outnumber
 * its `gpus` and this process does not run under MPS (`mps`), a device message goes as an envelope
 * only from k x 512 KiB, k = ranks per GPU rounded up (staging grows with the bytes, the waits with
 * k), and no copy kernel runs. A setting given in the environment (`*_set`) is kept as it is.
 * Sender-local and receiver-local choices: a receive decodes whatever arrives, so ranks need not
 * agree on them. */
typedef struct {
    size_t envelope_min; /* the smallest device message sent as an envelope */
    size_t copy_batch;   /* the largest payload a copy kernel batches (0: none) */
    int ranks_per_gpu;   /* k where the GPUs are shared that way, else 1 */
} nm_p2p_limits_t;
enum { NM_P2P_SHARED_MIN_PER_RANK = 512 * 1024 };
nm_p2p_limits_t nm_p2p_limits(int ranks, int gpus, int mps, size_t min_cfg, int min_set, size_t batch_cfg, int batch_set);

/* ---- small allreduces of one NCCL group, fused ----
 * Within one launched group (its operations and their order are the same on every rank: the
 * coalescing rounds and explicit groups agree on them), small allreduces of one NCCL type and op
 * are packed into one device buffer, reduced by one ncclAllReduce and unpacked: one NCCL
 * collective instead of many. The ranks reduce their buffers element by element, so every rank
 * must pack the same operations at the same offsets: the plan reads only what every rank shares,
 * each operation's kind, NCCL type and op (the type signature's basic type, the MPI op), its
 * NCCL element count (count x signature), the communicator's size and the settings (compared at
 * MPI_Init). Never a buffer's address, memory kind or layout: those differ by rank and change
 * only how a rank copies its operation in and out.
 * Modes: EXACT fuses only where the result cannot differ from separate calls whatever order NCCL
 * reduces in (integer types, whose sums and products wrap alike in any order; any type on
 * communicators of two ranks, where each element is one combination of two values), and only
 * where it pays: not on communicators of one rank, where NCCL's own call costs next to nothing
 * (1xH200: launching 64 fused took 4-6 us more than 64 in one NCCL group). ALL fuses everywhere:
 * floating-point sums and products on more ranks (the same reduction, possibly in another order
 * than a lone call of that size would take) and one-rank communicators (which tests use). */
enum { NM_FUSE_OFF = 0, NM_FUSE_EXACT = 1, NM_FUSE_ALL = 2 };
enum { NM_FUSE_BUCKET_MAX = 32 << 20 }; /* the most bytes one fused call reduces */
typedef struct {
    int kind;      /* NM_OPK_* */
    int nccl_type; /* NM_UNSUPPORTED when not reduced by NCCL */
    int nccl_op;
    size_t count;  /* NCCL elements */
} nm_fuse_op_t;
/* The plan of a group of n operations: bucket[i] is the fused call of operation i (0, 1, ..., in
 * the order of their first operations) or -1 (it runs as its own NCCL call); offset[i] its first
 * element in that call's buffer (each operation starts on a 16-byte boundary); total[b] the
 * elements of call b (total has room for n). A call takes operations of one type and op, none
 * larger than max_bytes, at most NM_FUSE_BUCKET_MAX bytes in all; a type and op with fewer than
 * min_ops such operations in the group are not fused. Returns the number of calls. */
int nm_fuse_plan(const nm_fuse_op_t *ops, int n, int comm_size, int mode, size_t max_bytes, int min_ops, int *bucket,
                 size_t *offset, size_t *total);
/* Whether a communicator of comm_size ranks may fuse at all in this mode (what the plan checks
 * first; a caller skips describing the group's operations when not). */
int nm_fuse_possible(int comm_size, int mode);

/* ---- MAX and MIN reductions in one NCCL group ----
 * NCCL 2.19 to 2.28 can mix up a MAX and a MIN reduction of one NCCL group (they are one device
 * function there, told apart by an argument that concurrent thread groups of a channel overwrite
 * for each other: design.md, "A MAX and a MIN reduction"). Where that applies (those versions, 2
 * ranks or more) and a launched group holds both, ncclmpi issues it as two NCCL groups: every
 * operation but the MIN reductions, then the MIN reductions (issue order within each). Every rank
 * sorts alike: the operations and their order are agreed, each one's MPI op is the same on every
 * rank, and so are the communicator's size and NCCL's version (comm_create refuses an NCCL
 * communicator whose ranks loaded different versions). */
int nm_minmax_hazard(int nccl_version, int comm_size);

/* ---- the staged route's own paths (src/route/stage.c) ----
 * Which way a staged call goes once nm_route() gave it NCCLMPI_ROUTE_STAGED: pipelined in chunks
 * through pinned host memory, on the GPU the ranks share, or (a nonblocking send with envelopes)
 * queued for the next flush. Each reads only facts every rank of the call shares (the pipeline
 * and the shared GPU make collective calls that every rank must make alike), or, for the send,
 * the sender's own settings. */

/* The pipelined staged collective (Allreduce, Reduce, Scan, Bcast larger than 2 chunks): its chunk
 * calls of the real MPI, the same on every rank. A reduction is chunked in whole elements of the
 * caller's datatype (an op, predefined or the user's, always gets the datatype and whole elements
 * it was given; MPI has every rank pass the same datatype to a reduction), so its datatype must
 * be dense (contig: count elements are count x size bytes in order); Bcast moves bytes (its ranks
 * may pass different datatypes of one signature). Never on intercommunicators (the real MPI's
 * MPI_IN_PLACE and MPI_ROOT rules differ there: the call is staged whole), nonblocking calls or
 * with NCCLMPI_AGREE. */
typedef struct {
    int kind;                 /* NM_OPK_* */
    unsigned flags;           /* NM_OPF_* */
    int agree;                /* NCCLMPI_AGREE */
    int inter;                /* an intercommunicator */
    int type_known;           /* the datatype's facts below are known */
    int contig;               /* the datatype is dense (DtypeInfo::contig) */
    unsigned long long esize; /* bytes of data in one element of it */
    long long count;          /* elements of it (the count every rank passes) */
    unsigned long long chunk; /* NCCLMPI_STAGE_CHUNK */
} nm_pipe_in_t;
typedef struct {
    int applies;
    int bytes;                /* chunked in MPI_BYTE (Bcast), else in elements of the datatype */
    unsigned long long unit;  /* bytes of one chunk element (1, or esize) */
    unsigned long long units; /* chunk elements in the whole message */
    unsigned long long per;   /* chunk elements in each chunk but the last (fits an int) */
    unsigned long long nchunks;
} nm_pipe_t;
nm_pipe_t nm_stage_pipeline(const nm_pipe_in_t *in);

/* A large staged collective on the GPU that the communicator's ranks share (CUDA IPC window):
 * where the window exists (agreed at its making), for blocking calls without NCCLMPI_AGREE or
 * NCCLMPI_FORCE_STAGED, whose shape the window can run (shape_ok: kind, op and type it reduces,
 * a whole element per step) and whose message reaches the window's threshold. */
typedef struct {
    int window;               /* the communicator has a shared window */
    int inter;
    unsigned flags;           /* NM_OPF_* */
    int agree, force_staged;
    int shape_ok;
    unsigned long long total; /* the message's bytes (the shape's) */
    unsigned long long min_bytes;
} nm_shared_in_t;
int nm_shared_applies(const nm_shared_in_t *in);

/* A nonblocking staged send with envelopes on (NCCLMPI_P2P_ENVELOPE): queued until the next flush
 * rather than sent now. Only where the engine may hold work (not MPI_THREAD_MULTIPLE), and for
 * the plain, synchronous and ready sends (a buffered send's buffer accounting is the user's). */
typedef struct {
    int env_active;           /* envelopes are on in this job */
    int may_hold;             /* engine_may_hold() */
    int kind;                 /* NM_OPK_* */
    unsigned flags;           /* NM_OPF_* */
    int send_mode;            /* MPI_Send/Ssend/Rsend or their I-forms */
    int queue;                /* inside an explicit group (its end sends them) or
                                 NCCLMPI_P2P_SEND_QUEUE=1: a send queued past its call otherwise
                                 leaves its receiver waiting for the sender's next MPI call, which
                                 MPI's progress rule does not allow */
} nm_defer_in_t;
int nm_env_send_defers(const nm_defer_in_t *in);

/* A blocking MPI_Sendrecv from a rank to itself on device memory: one device copy from the send
 * buffer to the receive buffer, without the real MPI. Its receive can only take its own send's
 * message: the source is the rank itself (or any source on a communicator of one rank), the tags
 * match, no other thread may send meanwhile (not MPI_THREAD_MULTIPLE), and no message to itself can
 * be pending for the receive: none of this rank's sends to itself on the communicator went to the
 * real MPI (`self_sent`: ncclmpi notes each one that passes through it), ncclmpi's probe queue holds
 * none (`held`), and the caller's PMPI_Iprobe, twice, finds none (for a send made before ncclmpi
 * saw the process's calls: the standard promises a probe only that it finds a sent message
 * eventually, and MPICH 5.0.2 finds a message a rank sent itself only at its second probe). An
 * earlier posted receive that would take the send instead leaves the receive nothing to match, so
 * such a program waits forever under any MPI. Both buffers one run of device memory, the message
 * no longer than the receive buffer (a truncation goes the real way, which reports it).
 * MPI_Sendrecv_replace to itself under the same conditions receives what it sent into the buffer
 * it sent from: nothing to copy, whatever its datatype (device memory: contig and the sizes are
 * not asked). */
typedef struct {
    int kind;                 /* NM_OPK_SENDRECV or NM_OPK_SENDRECV_REPLACE (else 0 is returned) */
    unsigned flags;           /* NM_OPF_* */
    int thread_multiple;      /* MPI_THREAD_MULTIPLE in this process */
    int inter;                /* an intercommunicator */
    int rank, size;           /* in the communicator */
    int dest, source;         /* the call's, ranks (source_any: MPI_ANY_SOURCE) */
    int source_any, tag_any;  /* MPI_ANY_SOURCE, MPI_ANY_TAG as the receive's */
    int stag, rtag;
    int device;               /* both buffers device memory on one device */
    int contig;               /* each one run of bytes */
    unsigned long long sbytes, rbytes;
    int held;                 /* ncclmpi holds messages of the communicator taken out of matching */
    int self_sent;            /* a send of this rank to itself went to the real MPI on the communicator */
} nm_self_in_t;
int nm_p2p_self_copy(const nm_self_in_t *in);

/* ---- one thread's NCCL work at a time per process (NCCLMPI_RENDEZVOUS) ----
 * An NCCL kernel waits on the GPU for its peers' kernels, and a device-wide synchronisation of the
 * application's (cudaFree, cudaDeviceSynchronize) waits for every kernel in flight in its process,
 * holding a driver lock that also stops other threads' launches and allocations there. With
 * threads each using a communicator of its own, in orders that differ by rank, a thread held
 * there behind a kernel of another communicator, whose peer is held the same way on its own rank,
 * never returns; so does a communicator's creation (NCCL's initialization, connections and
 * allocations) run while another thread's kernel waits for a peer.
 * Under it, a blocking collective that would make NCCL work (its communicator's creation, a
 * connection, an NCCL or one-shot launch) first takes its process's turn, where no other thread
 * of ncclmpi's holds it, and the ranks agree (one small host allreduce, MIN) whether every one
 * did: then each holds its process's only NCCL work of ncclmpi until the call returns; else the
 * call takes the staged path (busy), on every rank, and nothing is created. Each process then
 * has at most one thread's NCCL work in flight, and its peers have reached that same call.
 * setting: NCCLMPI_RENDEZVOUS's index (NM_RDV_*; the settings are compared across ranks at
 * MPI_Init); any_thread_multiple: 1 when some rank of the job runs under MPI_THREAD_MULTIPLE
 * (agreed over MPI_COMM_WORLD at MPI_Init, so every rank decides alike). 1: turns are taken. */
typedef enum { NM_RDV_AUTO = 0, NM_RDV_ON = 1, NM_RDV_OFF = 2 } nm_rdv_setting_t;
int nm_launch_rendezvous(int setting, int any_thread_multiple);
/* 1 when the call routed as d (from in, not busy) takes the turn first: a blocking collective on
 * an intracommunicator that creates or connects the communicator's NCCL side, or launches on the
 * NCCL or one-shot route without a zero-count carrier (whose ranks without data are not in it).
 * Every rank of the communicator decides alike (the routes and actions it reads are agreed). */
int nm_turn_applies(const nm_route_in_t *in, nm_decision_t d);

/* ---- a one-shot op inside an engine group ----
 * In a group of group_size ops (its size is agreed: every rank decides alike) an op routed to the
 * one-shot kernels keeps its kernel only where NCCL cannot run it (a reduction whose type or op
 * NCCL lacks): one NCCL group beats a kernel launch per op. A group of one runs its kernel.
 * reduction: the op reduces; nccl_type_ok, nccl_op_ok: NCCL has its type, its op. */
int nm_oneshot_keeps(int group_size, int reduction, int nccl_type_ok, int nccl_op_ok);

/* ---- sizes in the real MPI's int arguments ----
 * 1 when n bytes (or elements) fit an int argument of the real MPI, with *out set; else 0 (the
 * caller reports MPI_ERR_COUNT, or MPI_ERR_TRUNCATE for a receive that cannot hold it). */
int nm_int_fits(unsigned long long n, int *out);
/* The fewest whole elements of esize bytes (at most count) that hold `need` bytes: what to pack
 * of a receive buffer to read an envelope's first bytes (a prefix, never the whole buffer). */
long long nm_prefix_elems(long long count, unsigned long long esize, unsigned long long need);
/* Elements of esize bytes per piece of at most max_bytes (at least 1, at most INT_MAX): how a
 * transfer above an int's reach is cut into calls of the real MPI. */
int nm_piece_elems(unsigned long long esize, unsigned long long max_bytes);
/* NCCLMPI_STAGE_CHUNK's largest value: a chunk's bytes and elements fit an int (1 GiB). */
enum { NM_STAGE_CHUNK_MAX = 1 << 30 };

/* ---- datatype and op maps (designated tables, NM_UNSUPPORTED when NCCL lacks it) ---- */
/* NCCL type used when this predefined datatype is *reduced*; NM_UNSUPPORTED otherwise. */
int nm_map_dtype(MPI_Datatype dt);
/* NCCL op for a predefined op; NM_UNSUPPORTED for everything else. */
int nm_map_op(MPI_Op op);
/* Name of a predefined datatype, or NULL. */
const char *nm_dtype_name(MPI_Datatype dt);
/* Element size of a predefined datatype as NCCL sees it (0 when not mapped). */
size_t nm_nccl_type_size(int nccl_type);

#ifdef __cplusplus
}
#endif
#endif
