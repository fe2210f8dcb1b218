/* A stand-in for libnccl.so.2 (bench/device_overhead.sh): with the stand-in driver
 * (fake_cuda.c) it lets ncclmpi's NCCL route run on a machine without a GPU, so that callgrind can
 * count the host instructions the layer itself spends per device-buffer call, and lets tests run
 * ncclmpi's NCCL route without a GPU. Every collective of one rank is a copy from the send to the
 * receive buffer, a send to itself a copy into its receive. More than one rank is refused (ncclmpi
 * then takes the staged path), unless FAKE_NCCL_SHM=1: then the ranks of a communicator meet in a
 * shared-memory segment named by its unique id (below, "Several ranks"). Not a model of NCCL. */
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake_fail.h"

#define EXPORT __attribute__((visibility("default")))

struct ncclComm { int nranks; unsigned long ctx_gen; };

/* The stand-in driver's context generation (a device reset makes a new one, test/unit/fake_cuda.c):
 * a communicator is made in the current one, and NCCL crashes when one made in a context that was
 * reset is destroyed (it waits on that context's streams): the stand-in stops the process there. */
static unsigned long ctx_gen(void)
{
    static const unsigned long *g;
    static int looked;
    if (!looked) {
        g = (const unsigned long *)dlsym(RTLD_DEFAULT, "fake_cuda_ctx_gen");
        looked = 1;
    }
    return g ? *g : 0;
}

static size_t tsize(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static ncclResult_t copy(const void *s, void *r, size_t n, ncclDataType_t t)
{
    if (s != r && n) memmove(r, s, n * tsize(t));
    return ncclSuccess;
}
static ncclResult_t make(ncclComm_t *c, int nranks)
{
    if (nranks != 1) return ncclInvalidUsage;
    *c = calloc(1, sizeof(struct ncclComm));
    (*c)->nranks = 1;
    (*c)->ctx_gen = ctx_gen();
    return ncclSuccess;
}

/* ---- Several ranks (FAKE_NCCL_SHM=1) ----------------------------------------------------------
 * The ranks of a communicator map one shared-memory segment, named by its unique id: a counter of
 * arrivals and a slot per rank (a description of the call, then up to SLOT bytes of data). Each
 * collective runs at its call (a group's in their order): every rank describes its call and copies
 * its contribution into its slot, all meet (the counter reaches a multiple of the ranks: it only
 * grows), each checks that every rank made the same call and combines the slots in rank order,
 * and all meet again before a slot is reused. A rank that makes another call than its peers (a
 * different kind, count, type, op or root) is reported and aborts; one that makes none leaves its
 * peers waiting (the test's time limit). Sends and receives: below; splits are refused. As NCCL,
 * it refuses a communicator two of whose ranks are on one device with the same NCCL_HOSTID (or
 * none): ncclInvalidUsage on every rank, "Duplicate GPU detected" on stderr.
 *
 * Connections, as NCCL 2.22 and later make them: with NCCL_RUNTIME_CONNECT unset or 1 (NCCL's
 * default), a communicator's first collective of an algorithm, and its first send or receive
 * with a peer (NCCL's AlltoAll, Gather and Scatter are sends and receives), connect at the call,
 * on the host, waiting for the peers to connect too (NCCL's bootstrap exchange), with no MPI
 * progress; a peer that aborted its communicator leaves that wait going, as NCCL's
 * (connect_wait). Three algorithms here, by the call's bytes (below 16 KiB, below 1 MiB, larger).
 * With NCCL_RUNTIME_CONNECT=0 the algorithms connect at the communicator's creation (the ranks
 * meet there anyway); sends and receives connect at first use either way, as NCCL's do. */
enum { SLOT = 8 << 20, MAXR = 8, BOX = 1 << 20, MAXP = 256 };
struct desc { int kind, type, op, root; size_t count; };
struct shm_slot { struct desc d; char pad[64 - sizeof(struct desc)]; char data[SLOT]; };
enum { NALGO = 3 };
/* the algorithm of a collective of `bytes` (NCCL picks by size): below 16 KiB, below 1 MiB, larger */
static int algo_of(size_t bytes) { return bytes < (16 << 10) ? 0 : bytes < (1 << 20) ? 1 : 2; }
struct shm_head {
    _Atomic unsigned long arrived;
    char pad[56];
    _Atomic int algo_conn[NALGO][MAXR]; /* rank r connects algorithm a */
    _Atomic int peer_conn[MAXR][MAXR];  /* rank r connects to peer q */
    unsigned long long ident[MAXR][2];  /* rank r's device and host identity (shm_make) */
    struct shm_slot slot[MAXR];
};
/* a mailbox from one rank to another: chunks of a group's sends, in order (posted > taken: one
 * waits, of len bytes) */
struct shm_box { _Atomic unsigned long posted, taken; size_t len; char pad[40]; char data[BOX]; };
struct p2p { int send, peer; char *p; size_t bytes, done; int started; };
struct shm_comm {
    struct ncclComm base;
    int rank;
    unsigned long meetings;
    struct shm_head *h;
    struct shm_box *box;   /* [from * nranks + to] */
    struct p2p pend[MAXP]; /* this group's sends and receives, in call order */
    int npend;
    cudaStream_t st;       /* their stream */
    _Atomic int queued;    /* calls waiting on their streams (FAKE_CUDA_ASYNC=1) */
    unsigned char algo_ready[NALGO], peer_ready[MAXR]; /* connected (host side) */
    _Atomic int aborted;   /* ncclCommAbort: its waits give up, as NCCL's kernels do */
    size_t bytes;          /* the segment's */
};

static int shm_mode(void)
{
    const char *e = getenv("FAKE_NCCL_SHM");
    return e && *e == '1';
}

/* The real NCCL returns at once and runs the call on the GPU. Here, by default, the host waits for
 * the peers at the call; so that a peer can reach it, the wait keeps the real MPI progressing: what
 * ncclmpi posted before its launch (a coalescing round) completes meanwhile, as it would while a
 * GPU ran the call. (A program whose peer needs this rank's next MPI call first would wait here
 * forever, where a GPU would not.) With the stand-in driver's FAKE_CUDA_ASYNC=1 the call runs as
 * its stream's work instead, on the stream's own thread (no MPI there), and the host returns. */
static _Thread_local int on_stream;  /* running as a stream's work (FAKE_CUDA_ASYNC=1): no MPI here */
static void progress(unsigned spin)
{
    int flag;
    if (!on_stream && spin % 16 == 15) PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    sched_yield();
}
/* 0 when every rank arrived, -1 when the communicator was aborted meanwhile */
static int shm_meet(struct shm_comm *c)
{
    /* an aborted communicator's calls still queued on its streams meet nobody: counted, they
     * would complete a meeting its peers' next calls hold (NCCL's aborted kernels touch no peer) */
    if (atomic_load(&c->aborted)) return -1;
    const unsigned long target = ++c->meetings * (unsigned long)c->base.nranks;
    atomic_fetch_add(&c->h->arrived, 1);
    for (unsigned spin = 0; atomic_load(&c->h->arrived) < target; spin++) {
        if (atomic_load(&c->aborted)) return -1;
        progress(spin);
    }
    return 0;
}

/* With the stand-in driver's FAKE_CUDA_ASYNC=1, a call runs later as its stream's work
 * (fake_cuda_enqueue), as a GPU runs it: the host returns at once. */
typedef void (*enqueue_fn)(void *, void (*)(void *), const void *, size_t);
static enqueue_fn stream_enqueue(void)
{
    static enqueue_fn f;
    static int looked;
    if (!looked) {
        const char *e = getenv("FAKE_CUDA_ASYNC");
        if (e && *e == '1') f = (enqueue_fn)dlsym(RTLD_DEFAULT, "fake_cuda_enqueue");
        looked = 1;
    }
    return f;
}

/* NCCL_RUNTIME_CONNECT, read once per process as NCCL's parameters are */
static int runtime_connect(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("NCCL_RUNTIME_CONNECT");
        v = !(e && *e == '0');
    }
    return v;
}
/* wait for a peer's side of a connection, as NCCL's bootstrap does: no MPI progress (a peer that
 * needs this rank's progress before it connects waits forever); says so once after a while,
 * naming what it waits for. A peer that aborted its communicator instead does not end the wait
 * (NCCL 2.28.3, H100, 2 ranks, socket transport: a rank whose first collective or send/receive
 * waited for a peer that called ncclCommAbort was still inside the call 6 s later,
 * test/gpu/nccl_abort_probe.c); only this rank's own communicator aborted meanwhile (by another
 * thread) does: -1. */
static int connect_wait(struct shm_comm *c, _Atomic int *flag, const char *what, int which)
{
    time_t t0 = time(NULL);
    int told = 0;
    while (!atomic_load(flag)) {
        if (atomic_load(&c->aborted)) return -1;
        if (!told && time(NULL) - t0 > 5) {
            fprintf(stderr, "stand-in NCCL: rank %d of %d waits to connect %s %d (a connection at first use)\n",
                    c->rank, c->base.nranks, what, which);
            told = 1;
        }
        sched_yield();
    }
    return 0;
}
/* the first call of algorithm a on c: every rank connects (-1: c was aborted meanwhile) */
static int connect_algo(struct shm_comm *c, int a)
{
    if (c->algo_ready[a]) return 0;
    atomic_store(&c->h->algo_conn[a][c->rank], 1);
    for (int q = 0; q < c->base.nranks; q++)
        if (connect_wait(c, &c->h->algo_conn[a][q], "algorithm", a)) return -1;
    c->algo_ready[a] = 1;
    return 0;
}
/* the first sends or receives with the peers in `peers` (this rank's calls of a group): pairwise
 * (-1: c was aborted meanwhile) */
static int connect_peers(struct shm_comm *c, const unsigned char *peers)
{
    int any = 0;
    for (int q = 0; q < c->base.nranks; q++)
        if (peers[q] && q != c->rank && !c->peer_ready[q]) atomic_store(&c->h->peer_conn[c->rank][q], 1), any = 1;
    for (int q = 0; any && q < c->base.nranks; q++)
        if (peers[q] && q != c->rank && !c->peer_ready[q]) {
            if (connect_wait(c, &c->h->peer_conn[q][c->rank], "to peer", q)) return -1;
            c->peer_ready[q] = 1;
        }
    return 0;
}

/* the device of the caller's current context (the stand-in driver's), or -1 */
static int device_of_caller(void)
{
    typedef int (*get_fn)(int *);
    get_fn f = (get_fn)dlsym(RTLD_DEFAULT, "cuCtxGetDevice");
    int d = -1;
    return f && f(&d) == 0 ? d : -1;
}

static ncclResult_t shm_make(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank)
{
    if (!shm_mode() || nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks) return ncclInvalidUsage;
    char name[64];
    snprintf(name, sizeof(name), "%.60s", id->internal);
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) return ncclSystemError;
    const size_t head = offsetof(struct shm_head, slot) + (size_t)nranks * sizeof(struct shm_slot);
    const size_t bytes = head + (size_t)nranks * (size_t)nranks * sizeof(struct shm_box);
    void *p = ftruncate(fd, (off_t)bytes) == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return ncclSystemError;
    struct shm_comm *c = calloc(1, sizeof(*c));
    c->base.nranks = nranks;
    c->base.ctx_gen = ctx_gen();
    c->rank = rank;
    c->h = p;
    c->box = (struct shm_box *)(void *)((char *)p + head);
    c->bytes = bytes;
    if (!runtime_connect()) memset(c->algo_ready, 1, sizeof(c->algo_ready));  /* at creation, below */
    /* NCCL refuses two ranks on one GPU of one host, the host being NCCL_HOSTID where set
     * ("Duplicate GPU detected"): every rank finds the same pair and fails */
    unsigned long long *mine = c->h->ident[rank];
    mine[0] = (unsigned long long)device_of_caller();
    mine[1] = 0;
    const char *hid = getenv("NCCL_HOSTID");
    for (const char *q = hid; q && *q; q++) mine[1] = (mine[1] ^ (unsigned char)*q) * 1099511628211ull;
    if (hid) mine[1] |= 1;
    shm_meet(c);  /* every rank has mapped it and told its identity: its name can go */
    shm_unlink(name);
    for (int a = 0; a < nranks; a++)
        for (int b = 0; b < a; b++)
            if (c->h->ident[a][0] == c->h->ident[b][0] && c->h->ident[a][1] == c->h->ident[b][1]) {
                if (rank == a)
                    fprintf(stderr, "stand-in NCCL: Duplicate GPU detected: rank %d and rank %d both on device %llu\n", b, a,
                            c->h->ident[a][0]);
                shm_meet(c);  /* (all have read the table before it goes) */
                munmap(p, bytes);
                free(c);
                return ncclInvalidUsage;
            }
    *out = &c->base;
    return ncclSuccess;
}

static const char *const kinds[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter"};
enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_GATHER, K_SCATTER };

#define COMBINE(T)                                                                                \
    do {                                                                                          \
        T *o = (T *)out;                                                                          \
        for (size_t i = 0; i < n; i++) {                                                          \
            T a = ((const T *)(const void *)src[0])[i];                                           \
            for (int q = 1; q < nr; q++) {                                                        \
                const T b = ((const T *)(const void *)src[q])[i];                                 \
                a = op == ncclSum ? (T)(a + b) : op == ncclProd ? (T)(a * b) : op == ncclMax ? (b > a ? b : a) : (b < a ? b : a); \
            }                                                                                     \
            o[i] = a;                                                                             \
        }                                                                                         \
    } while (0)

/* out[i] = the combination of src[0..nr)[i] in rank order */
static ncclResult_t combine(void *out, const char *const *src, int nr, size_t n, ncclDataType_t t, ncclRedOp_t op)
{
    if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin) return ncclInvalidArgument;
    switch (t) {
    case ncclInt8: COMBINE(int8_t); break;
    case ncclUint8: COMBINE(uint8_t); break;
    case ncclInt32: COMBINE(int32_t); break;
    case ncclUint32: COMBINE(uint32_t); break;
    case ncclInt64: COMBINE(int64_t); break;
    case ncclUint64: COMBINE(uint64_t); break;
    case ncclFloat32: COMBINE(float); break;
    case ncclFloat64: COMBINE(double); break;
    default: return ncclInvalidArgument;
    }
    return ncclSuccess;
}

struct coll_args { struct shm_comm *c; struct desc d; const void *s; size_t mine; void *r; size_t rbytes; };
static ncclResult_t shm_coll_now(struct shm_comm *c, struct desc d, const void *s, size_t mine, void *r, size_t rbytes);
static void coll_later(void *p)
{
    const struct coll_args *a = p;
    on_stream = 1;
    if (shm_coll_now(a->c, a->d, a->s, a->mine, a->r, a->rbytes) != ncclSuccess) {
        if (!atomic_load(&a->c->aborted)) {
            fprintf(stderr, "stand-in NCCL: a call that ran as its stream's work failed\n");
            abort();
        }
    }
    atomic_fetch_sub(&a->c->queued, 1);
}
/* the call now, or as the stream's work (FAKE_CUDA_ASYNC=1) */
static ncclResult_t shm_coll(struct shm_comm *c, struct desc d, const void *s, size_t mine, void *r, size_t rbytes,
                             cudaStream_t st)
{
    /* connections first, on the host (NCCL's ncclGroupEnd) */
    if (d.kind == K_ALLTOALL || d.kind == K_GATHER || d.kind == K_SCATTER) {
        unsigned char peers[MAXR] = {0};
        for (int q = 0; q < c->base.nranks; q++) peers[q] = d.kind == K_ALLTOALL || c->rank == d.root || q == d.root;
        if (connect_peers(c, peers)) return ncclRemoteError;
    } else if (connect_algo(c, algo_of(d.count * tsize((ncclDataType_t)d.type)))) {
        return ncclRemoteError;
    }
    enqueue_fn q = stream_enqueue();
    if (!q) return shm_coll_now(c, d, s, mine, r, rbytes);
    const int elementwise = d.kind == K_ALLREDUCE || d.kind == K_BCAST || d.kind == K_REDUCE;
    if (!elementwise && (mine > SLOT || rbytes > SLOT * (size_t)c->base.nranks)) return ncclInvalidUsage;
    const struct coll_args a = {c, d, s, mine, r, rbytes};
    atomic_fetch_add(&c->queued, 1);
    q(st, coll_later, &a, sizeof(a));
    return ncclSuccess;
}

/* One collective of several ranks: `mine` bytes of this rank's contribution go into its slot;
 * after the meeting, every rank checks the calls match, then `finish` reads the slots. */
static ncclResult_t shm_coll_now(struct shm_comm *c, struct desc d, const void *s, size_t mine, void *r, size_t rbytes)
{
    const int nr = c->base.nranks;
    const size_t es = tsize((ncclDataType_t)d.type);
    if (mine > SLOT && (d.kind == K_ALLREDUCE || d.kind == K_BCAST || d.kind == K_REDUCE)) {
        /* elementwise: in pieces of a slot, every rank cutting alike */
        const size_t per = SLOT / es;
        for (size_t at = 0; at < d.count; at += per) {
            struct desc p = d;
            p.count = d.count - at < per ? d.count - at : per;
            const size_t off = at * es, n = p.count * es;
            ncclResult_t rc = shm_coll_now(c, p, s ? (const char *)s + off : NULL, n, (char *)r + off, n);
            if (rc != ncclSuccess) return rc;
        }
        return ncclSuccess;
    }
    if (mine > SLOT || rbytes > SLOT * (size_t)nr) return ncclInvalidUsage;
    /* an aborted communicator's calls still queued touch nothing a peer may be reading (its
     * slot holds the call a peer's meeting may have counted it in) */
    if (atomic_load(&c->aborted)) return ncclRemoteError;
    struct shm_slot *me = &c->h->slot[c->rank];
    me->d = d;
    if (mine && s) memcpy(me->data, s, mine);
    if (shm_meet(c)) return ncclRemoteError;
    for (int q = 0; q < nr; q++) {
        const struct desc *o = &c->h->slot[q].d;
        if (o->kind != d.kind || o->type != d.type || o->op != d.op || o->root != d.root || o->count != d.count) {
            fprintf(stderr, "stand-in NCCL: rank %d of %d called nccl%s(count %zu, type %d, op %d, root %d) where rank %d "
                    "called nccl%s(count %zu, type %d, op %d, root %d): the ranks' calls differ (meeting %lu, arrived %lu, aborted %d)\n",
                    c->rank, nr, kinds[d.kind], d.count, d.type, d.op, d.root, q, kinds[o->kind], o->count, o->type,
                    o->op, o->root, c->meetings, (unsigned long)atomic_load(&c->h->arrived), (int)atomic_load(&c->aborted));
            abort();
        }
    }
    const char *src[MAXR];
    for (int q = 0; q < nr; q++) src[q] = c->h->slot[q].data;
    ncclResult_t rc = ncclSuccess;
    switch (d.kind) {
    case K_ALLREDUCE: rc = combine(r, src, nr, d.count, (ncclDataType_t)d.type, (ncclRedOp_t)d.op); break;
    case K_REDUCE:
        if (c->rank == d.root) rc = combine(r, src, nr, d.count, (ncclDataType_t)d.type, (ncclRedOp_t)d.op);
        break;
    case K_BCAST: memmove(r, src[d.root], d.count * es); break;
    case K_ALLGATHER:
        for (int q = 0; q < nr; q++) memcpy((char *)r + (size_t)q * d.count * es, src[q], d.count * es);
        break;
    case K_REDUCE_SCATTER: {
        const char *part[MAXR];
        for (int q = 0; q < nr; q++) part[q] = src[q] + (size_t)c->rank * d.count * es;
        rc = combine(r, part, nr, d.count, (ncclDataType_t)d.type, (ncclRedOp_t)d.op);
        break;
    }
    case K_ALLTOALL:
        for (int q = 0; q < nr; q++) memcpy((char *)r + (size_t)q * d.count * es, src[q] + (size_t)c->rank * d.count * es, d.count * es);
        break;
    case K_GATHER:
        if (c->rank == d.root)
            for (int q = 0; q < nr; q++) memcpy((char *)r + (size_t)q * d.count * es, src[q], d.count * es);
        break;
    case K_SCATTER: memcpy(r, src[d.root] + (size_t)c->rank * d.count * es, d.count * es); break;
    }
    if (shm_meet(c)) return ncclRemoteError;  /* every rank has read the slots */
    return rc;
}

static struct shm_comm *shm_of(ncclComm_t c) { return c && c->nranks > 1 ? (struct shm_comm *)(void *)c : NULL; }

/* Sends and receives of several ranks run at the group's end (ncclGroupEnd), pairwise through the
 * mailboxes: each pass moves what it can (a send's next chunk into an empty box, a receive's next
 * chunk out of a full one; per peer and direction in call order), the real MPI progressed between
 * passes, until every one is done. A receive of another size than its send is reported. */
static _Thread_local int group_depth;
static _Thread_local struct shm_comm *group_comms[16];
static _Thread_local int ngroup_comms;

/* NCCL 2.19 to 2.28 can compute a MAX and a MIN reduction wrong when one group holds both (max and
 * min are one device function there, told apart by an argument kept in one shared-memory slot per
 * channel, which concurrent thread groups of a channel overwrite for each other's work: measured
 * with trees of 3 ranks and more; NVLS runs such groups at 2; per thread group from 2.29). The
 * stand-in refuses such a group of 2 ranks or more where the version it reports
 * (FAKE_NCCL_VERSION, default the headers') is among them, so that tests fail where real NCCL may
 * give wrong results. */
static int version(void)
{
    const char *v = getenv("FAKE_NCCL_VERSION");
    return v && *v ? atoi(v) : NCCL_VERSION_CODE;
}
static _Thread_local struct { const void *comm; unsigned seen; } minmax[16];
static _Thread_local int nminmax;
static ncclResult_t minmax_check(ncclComm_t c, ncclRedOp_t op)
{
    if (!group_depth || c->nranks < 2 || (op != ncclMax && op != ncclMin) || version() < 21900 || version() >= 22900)
        return ncclSuccess;
    int k = 0;
    while (k < nminmax && minmax[k].comm != c) k++;
    if (k == nminmax) {
        if (k == 16) return ncclSuccess;
        minmax[nminmax++].comm = c, minmax[k].seen = 0;
    }
    minmax[k].seen |= op == ncclMax ? 1u : 2u;
    if (minmax[k].seen != 3u) return ncclSuccess;
    fprintf(stderr, "stand-in NCCL: a MAX and a MIN reduction in one group of %d ranks (NCCL %d computes them wrong)\n",
            c->nranks, version());
    return ncclInvalidUsage;
}

static void p2p_moves(struct shm_comm *c, struct p2p *pend, int npend)
{
    const int nr = c->base.nranks;
    for (unsigned spin = 0;; spin++) {
        int left = 0;
        unsigned char blocked[2][MAXR] = {{0}};  /* a peer's earlier op in that direction is pending */
        for (int i = 0; i < npend; i++) {
            struct p2p *o = &pend[i];
            if (o->started && o->done == o->bytes) continue;
            left++;
            if (blocked[o->send][o->peer]) continue;
            blocked[o->send][o->peer] = 1;
            struct shm_box *b = &c->box[o->send ? c->rank * nr + o->peer : o->peer * nr + c->rank];
            const unsigned long posted = atomic_load(&b->posted), taken = atomic_load(&b->taken);
            if (o->send && posted == taken) {
                const size_t n = o->bytes - o->done < BOX ? o->bytes - o->done : BOX;
                if (n) memcpy(b->data, o->p + o->done, n);
                b->len = n;
                o->done += n;
                o->started = 1;
                atomic_fetch_add(&b->posted, 1);
            } else if (!o->send && posted > taken) {
                const size_t n = b->len;
                if (o->done + n > o->bytes || (n < BOX && o->done + n != o->bytes)) {
                    fprintf(stderr, "stand-in NCCL: rank %d receives %zu bytes from rank %d, which sends %zu (or more)\n",
                            c->rank, o->bytes, o->peer, o->done + n);
                    abort();
                }
                if (n) memcpy(o->p + o->done, b->data, n);
                o->done += n;
                o->started = 1;
                atomic_fetch_add(&b->taken, 1);
            }
        }
        if (!left || atomic_load(&c->aborted)) break;
        progress(spin);
    }
}
struct p2p_args { struct shm_comm *c; int npend; struct p2p pend[MAXP]; };
static void p2p_later(void *p)
{
    struct p2p_args *a = p;
    on_stream = 1;
    p2p_moves(a->c, a->pend, a->npend);
    atomic_fetch_sub(&a->c->queued, 1);
}
/* the group's sends and receives on c: now, or as its stream's work (FAKE_CUDA_ASYNC=1) */
static ncclResult_t p2p_run(struct shm_comm *c)
{
    unsigned char peers[MAXR] = {0};
    for (int i = 0; i < c->npend; i++) peers[c->pend[i].peer] = 1;
    if (connect_peers(c, peers)) {
        c->npend = 0;  /* (never run) */
        return ncclRemoteError;
    }
    enqueue_fn q = stream_enqueue();
    if (q) {
        struct p2p_args *a = malloc(sizeof(*a));
        a->c = c;
        a->npend = c->npend;
        memcpy(a->pend, c->pend, sizeof(c->pend[0]) * (size_t)c->npend);
        atomic_fetch_add(&c->queued, 1);
        q(c->st, p2p_later, a, sizeof(*a));
        free(a);
    } else {
        p2p_moves(c, c->pend, c->npend);
    }
    c->npend = 0;
    return ncclSuccess;
}

static ncclResult_t p2p_add(struct shm_comm *c, int send, int peer, const void *p, size_t bytes, cudaStream_t st)
{
    if (peer < 0 || peer >= c->base.nranks || c->npend == MAXP) return ncclInvalidUsage;
    c->st = st;  /* (a group's calls on one communicator share its stream) */
    c->pend[c->npend++] = (struct p2p){send, peer, (char *)(uintptr_t)p, bytes, 0, 0};
    if (group_depth == 0) return p2p_run(c);
    int k = 0;
    while (k < ngroup_comms && group_comms[k] != c) k++;
    if (k == ngroup_comms) {
        if (k == 16) return ncclInvalidUsage;
        group_comms[ngroup_comms++] = c;
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetVersion(int *v) { *v = version(); return ncclSuccess; }
EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (fake_fail("ncclGetUniqueId")) return ncclSystemError;
    static int made;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "/nm-fake-nccl-%d-%d-%ld", (int)getpid(), made++, (long)ts.tv_nsec);
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int r)
{
    if (fake_fail("ncclCommInitRank")) return ncclSystemError;
    return n == 1 ? make(c, n) : shm_make(c, n, &id, r);
}
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int r, ncclConfig_t *cfg)
{
    if (fake_fail("ncclCommInitRankConfig")) return ncclSystemError;
    (void)cfg;
    return n == 1 ? make(c, n) : shm_make(c, n, &id, r);
}
EXPORT ncclResult_t ncclCommSplit(ncclComm_t p, int color, int key, ncclComm_t *c, ncclConfig_t *cfg)
{
    if (fake_fail("ncclCommSplit")) return ncclSystemError;
    (void)color; (void)key; (void)cfg;
    if (shm_of(p)) return ncclInvalidUsage;
    return make(c, 1);
}
static ncclResult_t drop(ncclComm_t c, int abort_it)
{
    if (c && c->ctx_gen != ctx_gen()) {
        fprintf(stderr, "fake_nccl: %s of a communicator whose CUDA context was reset (NCCL would crash)\n",
                abort_it ? "ncclCommAbort" : "ncclCommDestroy");
        abort();
    }
    struct shm_comm *m = shm_of(c);
    /* (a peer waiting to connect to it goes on waiting, as NCCL's do: connect_wait) */
    if (m && abort_it) atomic_store(&m->aborted, 1);
    /* as NCCL's, after the communicator's calls still queued on streams */
    while (m && atomic_load(&m->queued)) sched_yield();
    if (m) munmap(m->h, m->bytes);
    free(c);
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { return drop(c, 0); }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { return drop(c, 1); }
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) { (void)c; *e = ncclSuccess; return ncclSuccess; }
EXPORT const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "stand-in NCCL error"; }
EXPORT const char *ncclGetLastError(ncclComm_t c) { (void)c; return ""; }
EXPORT ncclResult_t ncclGroupStart(void)
{
    if (fake_fail("ncclGroupStart")) return ncclSystemError;
    group_depth++;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    nminmax = 0;
    if (fake_fail("ncclGroupEnd")) {  /* (the group's sends and receives never run) */
        for (int k = 0; k < ngroup_comms; k++) group_comms[k]->npend = 0;
        ngroup_comms = 0;
        return ncclSystemError;
    }
    ncclResult_t rc = ncclSuccess;
    for (int k = 0; k < ngroup_comms; k++)
        if (rc == ncclSuccess) rc = p2p_run(group_comms[k]);
        else group_comms[k]->npend = 0;  /* (never run) */
    ngroup_comms = 0;
    return rc;
}
EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclAllReduce")) return ncclUnhandledCudaError;
    (void)st;
    if (minmax_check(c, op) != ncclSuccess) return ncclInvalidUsage;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_ALLREDUCE, t, op, -1, n}, s, n * tsize(t), r, n * tsize(t), st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclReduce")) return ncclSystemError;
    (void)st;
    if (minmax_check(c, op) != ncclSuccess) return ncclInvalidUsage;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_REDUCE, t, op, root, n}, s, n * tsize(t), r, n * tsize(t), st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclBroadcast")) return ncclSystemError;
    (void)st;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_BCAST, t, -1, root, n}, m->rank == root ? s : NULL, n * tsize(t), r, n * tsize(t), st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclAllGather")) return ncclSystemError;
    (void)st;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_ALLGATHER, t, -1, -1, n}, s, n * tsize(t), r, n * tsize(t) * (size_t)c->nranks, st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclReduceScatter")) return ncclSystemError;
    (void)st;
    if (minmax_check(c, op) != ncclSuccess) return ncclInvalidUsage;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_REDUCE_SCATTER, t, op, -1, n}, s, n * tsize(t) * (size_t)c->nranks, r, n * tsize(t), st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclAlltoAll")) return ncclSystemError;
    (void)st;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_ALLTOALL, t, -1, -1, n}, s, n * tsize(t) * (size_t)c->nranks, r, n * tsize(t) * (size_t)c->nranks, st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclGather")) return ncclSystemError;
    (void)st;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_GATHER, t, -1, root, n}, s, n * tsize(t), r, n * tsize(t) * (size_t)c->nranks, st);
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclScatter(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclScatter")) return ncclSystemError;
    (void)st;
    struct shm_comm *m = shm_of(c);
    if (m) return shm_coll(m, (struct desc){K_SCATTER, t, -1, root, n}, m->rank == root ? s : NULL, n * tsize(t) * (size_t)c->nranks, r, n * tsize(t), st);
    return copy(s, r, n, t);
}
/* one rank: a send to itself meets its receive (in call order, within or across groups: the
 * stand-in has no streams to order them by) */
#define PEND 64
static struct { const void *s; void *r; size_t bytes; } sends[PEND], recvs[PEND];
static int nsends, nrecvs;
static ncclResult_t meet(void)
{
    while (nsends && nrecvs) {
        if (sends[0].bytes != recvs[0].bytes) return ncclInvalidUsage;
        if (sends[0].bytes && sends[0].s != recvs[0].r) memmove(recvs[0].r, sends[0].s, sends[0].bytes);
        memmove(sends, sends + 1, --nsends * sizeof(sends[0]));
        memmove(recvs, recvs + 1, --nrecvs * sizeof(recvs[0]));
    }
    return ncclSuccess;
}
EXPORT ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclSend")) return ncclSystemError;
    (void)st;
    if (shm_of(c)) return p2p_add(shm_of(c), 1, peer, s, n * tsize(t), st);
    if (peer != 0 || nsends == PEND) return ncclInvalidUsage;
    sends[nsends].s = s;
    sends[nsends++].bytes = n * tsize(t);
    return meet();
}
EXPORT ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    if (fake_fail("ncclRecv")) return ncclSystemError;
    (void)st;
    if (shm_of(c)) return p2p_add(shm_of(c), 0, peer, r, n * tsize(t), st);
    if (peer != 0 || nrecvs == PEND) return ncclInvalidUsage;
    recvs[nrecvs].r = r;
    recvs[nrecvs++].bytes = n * tsize(t);
    return meet();
}
