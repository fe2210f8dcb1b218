/* neighbor_prog: neighbourhood collectives (MPI_Neighbor_allgather(v), MPI_Neighbor_alltoall(v/w)
 * and their MPI_Ineighbor_ forms) with device buffers of the stand-in CUDA driver
 * (test/unit/fake_cuda.c; its device memory is host memory) on some ranks and host buffers on the
 * others, run by test/unit/neighbor.sh with envelopes off, in the host test mode and in device
 * mode (where every rank runs them as point-to-point: the program reports whether it did, from
 * ncclmpi's test hook). Topologies: a periodic ring (one and two ranks name the same neighbour
 * twice), a non-periodic 2-D grid (missing neighbours: their receive blocks keep their contents), a
 * distributed graph with a repeated edge, and an MPI_Graph_create ring. Every result is compared
 * byte for byte with the real MPI's own call (PMPI_) on host copies of the same inputs into the
 * same poisoned receive buffer; two nonblocking calls are in flight at once on one communicator,
 * and (as point-to-point) one on a duplicate of a topology communicator freed before its wait.
 * NEIGHBOR_THREADS set: MPI_THREAD_MULTIPLE, and two threads run every call at once, each on
 * topology communicators of its own.
 * Per-neighbour counts of the v and w forms depend on the (sender, receiver) pair. Where the real
 * MPI runs them (not as point-to-point), the nonblocking forms on the ring of one or two ranks are
 * left out: Open MPI 4.1's nonblocking calls pair the blocks of a neighbour named twice otherwise
 * than its blocking ones (the reference), which the point-to-point form matches. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { K = 5, MAXN = 8, NBUF = 8, BUFSZ = 1 << 16 };
enum { AG, AGV, A2A, A2AV, A2AW, NCALL };
static const char *const call_name[NCALL] = {"allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw"};

static int rank, size, failures; /* (failures: added to atomically, threads too) */
static int scale = 1; /* NEIGHBOR_SCALE: blocks that many times larger (envelopes from 1 KiB at 64) */

static int pair_count(int s, int r) { return (1 + (s + 2 * r) % 4) * scale; }

/* whether ncclmpi runs comm's neighbourhood collectives as point-to-point (its test hook) */
static int as_p2p(MPI_Comm comm)
{
    int (*f)(MPI_Comm) = (int (*)(MPI_Comm))dlsym(RTLD_DEFAULT, "ncclmpi_test_neighbor_p2p");
    return f && f(comm);
}

typedef struct {
    MPI_Comm comm;
    const char *name;
    int nin, nout, in[MAXN], out[MAXN];
} topo_t;

static void neighbours(topo_t *t)
{
    int kind;
    MPI_Topo_test(t->comm, &kind);
    if (kind == MPI_CART) {
        int nd;
        MPI_Cartdim_get(t->comm, &nd);
        t->nin = t->nout = 2 * nd;
        for (int d = 0; d < nd; d++) {
            MPI_Cart_shift(t->comm, d, 1, &t->in[2 * d], &t->in[2 * d + 1]);
            t->out[2 * d] = t->in[2 * d];
            t->out[2 * d + 1] = t->in[2 * d + 1];
        }
    } else if (kind == MPI_GRAPH) {
        MPI_Graph_neighbors_count(t->comm, rank, &t->nin);
        MPI_Graph_neighbors(t->comm, rank, MAXN, t->in);
        t->nout = t->nin;
        memcpy(t->out, t->in, sizeof(t->in));
    } else {
        int w, iw[MAXN], ow[MAXN];
        MPI_Dist_graph_neighbors_count(t->comm, &t->nin, &t->nout, &w);
        MPI_Dist_graph_neighbors(t->comm, MAXN, t->in, iw, MAXN, t->out, ow);
    }
}

/* the arguments of one call, for one side of the comparison */
typedef struct {
    int scount, rcount, scounts[MAXN], sdispls[MAXN], rcounts[MAXN], rdispls[MAXN];
    MPI_Aint sab[MAXN], rab[MAXN];
    MPI_Datatype ts[MAXN], tr[MAXN];
} args_t;

static void make_args(const topo_t *t, int call, args_t *a)
{
    memset(a, 0, sizeof(*a));
    a->scount = a->rcount = K * scale;
    int off = 0;
    for (int i = 0; i < t->nin; i++) {
        const int src = t->in[i];
        a->rcounts[i] = call == AG || call == A2A ? K * scale : src == MPI_PROC_NULL ? 2 : call == AGV ? (1 + src % 3) * scale
                                                                                                       : pair_count(src, rank);
        a->rdispls[i] = off + 1; /* a gap of one element before each block */
        a->rab[i] = (MPI_Aint)a->rdispls[i] * (MPI_Aint)sizeof(int);
        a->tr[i] = MPI_INT;
        off += a->rcounts[i] + 1;
    }
    off = 0;
    for (int j = 0; j < t->nout; j++) {
        const int dst = t->out[j];
        a->scounts[j] = dst == MPI_PROC_NULL ? 3 : pair_count(rank, dst);
        a->sdispls[j] = off;
        a->sab[j] = (MPI_Aint)off * (MPI_Aint)sizeof(int);
        a->ts[j] = MPI_INT;
        off += a->scounts[j] + 2;
    }
    if (call == AGV) a->scount = (1 + rank % 3) * scale; /* one count for all its neighbours, by sender */
}

/* the call through MPI_ (intercepted) or PMPI_ (the reference); nb: the I-form, waited */
static int run(int call, int ref, int nb, const void *sb, void *rb, const args_t *a, MPI_Comm c, MPI_Request *keep)
{
    MPI_Request q = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
#define CALL(BLOCKING, NONBLOCKING, ...)                                                \
    do {                                                                              \
        if (ref) rc = P##BLOCKING(__VA_ARGS__);                                       \
        else if (nb) rc = NONBLOCKING(__VA_ARGS__, &q);                               \
        else rc = BLOCKING(__VA_ARGS__);                                              \
    } while (0)
    switch (call) {
    case AG: CALL(MPI_Neighbor_allgather, MPI_Ineighbor_allgather, sb, a->scount, MPI_INT, rb, a->rcount, MPI_INT, c); break;
    case AGV:
        CALL(MPI_Neighbor_allgatherv, MPI_Ineighbor_allgatherv, sb, a->scount, MPI_INT, rb, a->rcounts, a->rdispls, MPI_INT, c);
        break;
    case A2A: CALL(MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall, sb, a->scount, MPI_INT, rb, a->rcount, MPI_INT, c); break;
    case A2AV:
        CALL(MPI_Neighbor_alltoallv, MPI_Ineighbor_alltoallv, sb, a->scounts, a->sdispls, MPI_INT, rb, a->rcounts, a->rdispls,
             MPI_INT, c);
        break;
    default:
        CALL(MPI_Neighbor_alltoallw, MPI_Ineighbor_alltoallw, sb, a->scounts, a->sab, a->ts, rb, a->rcounts, a->rab, a->tr, c);
        break;
    }
#undef CALL
    if (nb && rc == MPI_SUCCESS) {
        if (keep) *keep = q;
        else rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
    return rc;
}

/* the four topologies over MPI_COMM_WORLD (made by the main thread: Open MPI 4.1 can hang when
 * threads make communicators at once) */
static int make_topos(topo_t *topo)
{
    int nt = 0;
    int periods = 1;
    MPI_Cart_create(MPI_COMM_WORLD, 1, &size, &periods, 0, &topo[nt].comm);
    topo[nt++].name = "periodic ring";
    int dims[2] = {0, 0}, p2[2] = {0, 0};
    MPI_Dims_create(size, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, p2, 0, &topo[nt].comm);
    topo[nt++].name = "2-D grid";
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int outs[3] = {right, right, left}, ins[3] = {left, left, right}, weights[3] = {1, 1, 1};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 3, ins, weights, 3, outs, weights, MPI_INFO_NULL, 0, &topo[nt].comm);
    topo[nt++].name = "graph with a repeated edge";
    int *index = malloc(size * sizeof(int)), *edges = malloc(2 * size * sizeof(int));
    for (int r = 0; r < size; r++) {
        index[r] = 2 * (r + 1);
        edges[2 * r] = (r + 1) % size;
        edges[2 * r + 1] = (r + size - 1) % size;
    }
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &topo[nt].comm);
    topo[nt++].name = "graph ring";
    free(index);
    free(edges);
    for (int t = 0; t < nt; t++) {
        neighbours(&topo[t]);
        MPI_Comm_set_errhandler(topo[t].comm, MPI_ERRORS_RETURN);
    }
    return nt;
}

/* one thread's communicators and buffers */
typedef struct {
    topo_t topo[4];
    int nt;
    int *d[4];                          /* device buffers */
    int *hs, *hr, *ref, *hs2, *hr2;     /* host ones */
} set_t;

static int ints, p2p, ring_nb_skipped;

/* every call and form on every topology, twice (see the passes), and two calls in flight */
static void check_set(set_t *x)
{
    topo_t *topo = x->topo;
    const int nt = x->nt;
    int *hs = x->hs, *hr = x->hr, *ref = x->ref, *hs2 = x->hs2, *hr2 = x->hr2;
    /* pass 0: device buffers on even ranks, host ones on odd ranks; pass 1: device everywhere */
    for (int pass = 0; pass < 2; pass++) {
        const int dev = pass == 1 || rank % 2 == 0;
        int *ds = dev ? x->d[0] : hs2, *dr = dev ? x->d[1] : hr2;
        int *ds2 = x->d[2], *dr2 = x->d[3];
        for (int t = 0; t < nt; t++)
            for (int call = 0; call < NCALL; call++)
                for (int nb = 0; nb < 2; nb++) {
                    if (nb && t == 0 && ring_nb_skipped) continue;
                    args_t a;
                    make_args(&topo[t], call, &a);
                    for (int i = 0; i < ints; i++) hs[i] = rank * 100000 + call * 10000 + i;
                    memcpy(ds, hs, BUFSZ);
                    memset(hr, 0xa5, BUFSZ);
                    memset(dr, 0xa5, BUFSZ);
                    int rc = run(call, 1, 0, hs, hr, &a, topo[t].comm, NULL);
                    memcpy(ref, hr, BUFSZ);
                    int rc2 = run(call, 0, nb, ds, dr, &a, topo[t].comm, NULL);
                    if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS || memcmp(dr, ref, BUFSZ)) {
                        int at = -1;
                        for (int i = 0; i < ints && at < 0; i++)
                            if (dr[i] != ref[i]) at = i;
                        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
                        printf("rank %d: %s %s%s (%s buffers): rc %d/%d, int %d is %d, want %d\n", rank, topo[t].name, nb ? "I" : "",
                               call_name[call], dev ? "device" : "host", rc, rc2, at, at < 0 ? 0 : dr[at], at < 0 ? 0 : ref[at]);
                    }
                }
        /* two nonblocking calls in flight at once on one communicator (matched in call order) */
        for (int t = ring_nb_skipped ? 1 : 0; t < nt; t++) {
            args_t a;
            make_args(&topo[t], A2A, &a);
            for (int i = 0; i < ints; i++) hs[i] = rank * 100000 + i, ds2[i] = -(rank * 100000 + i);
            memcpy(ds, hs, BUFSZ);
            memset(dr, 0xa5, BUFSZ);
            memset(dr2, 0x5a, BUFSZ);
            MPI_Request q[2];
            run(A2A, 0, 1, ds, dr, &a, topo[t].comm, &q[0]);
            run(A2A, 0, 1, ds2, dr2, &a, topo[t].comm, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            memset(hr, 0xa5, BUFSZ);
            run(A2A, 1, 0, hs, hr, &a, topo[t].comm, NULL);
            for (int i = 0; i < ints; i++) hs[i] = -(rank * 100000 + i);
            memset(ref, 0x5a, BUFSZ);
            run(A2A, 1, 0, hs, ref, &a, topo[t].comm, NULL);
            if (memcmp(dr, hr, BUFSZ) || memcmp(dr2, ref, BUFSZ)) {
                __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
                printf("rank %d: %s, two MPI_Ineighbor_alltoall in flight: %s differs\n", rank, topo[t].name,
                       memcmp(dr, hr, BUFSZ) ? "the first" : "the second");
            }
        }
    }
}

static void *thread_main(void *p)
{
    check_set(p);
    return NULL;
}

int main(int argc, char **argv)
{
    const int nthreads = stand_in_mpi_init(&argc, &argv, "NEIGHBOR_THREADS", &rank, &size);
    if (getenv("NEIGHBOR_SCALE")) scale = atoi(getenv("NEIGHBOR_SCALE"));
    CUdeviceptr b[NBUF];
    if (!stand_in_driver("neighbor_prog", NBUF, BUFSZ, b)) {
        MPI_Finalize();
        return 77;
    }
    ints = BUFSZ / (int)sizeof(int);
    int *hs = malloc(BUFSZ), *hr = malloc(BUFSZ), *ref = malloc(BUFSZ), *hs2 = malloc(BUFSZ), *hr2 = malloc(BUFSZ);
    set_t sets[2];
    for (int th = 0; th < nthreads; th++) {
        set_t *x = &sets[th];
        x->nt = make_topos(x->topo);
        for (int k = 0; k < 4; k++) x->d[k] = (int *)(uintptr_t)b[4 * th + k];
        x->hs = th ? malloc(BUFSZ) : hs, x->hr = th ? malloc(BUFSZ) : hr, x->ref = th ? malloc(BUFSZ) : ref;
        x->hs2 = th ? malloc(BUFSZ) : hs2, x->hr2 = th ? malloc(BUFSZ) : hr2;
    }
    topo_t *topo = sets[0].topo;
    const int nt = sets[0].nt;
    p2p = 1;
    for (int t = 0; t < nt; t++) p2p &= as_p2p(topo[t].comm);
    ring_nb_skipped = !p2p && size <= 2; /* (see above) */
    stand_in_threads(thread_main, sets, sizeof(sets[0]), nthreads); /* (each on its own communicators) */
    if (nthreads > 1) {
        for (int t = 0; t < sets[1].nt; t++) MPI_Comm_free(&sets[1].topo[t].comm);
        free(sets[1].hs), free(sets[1].hr), free(sets[1].ref), free(sets[1].hs2), free(sets[1].hr2);
    }
    /* a nonblocking call on a duplicate of the 2-D grid (its topology, and ncclmpi's duplicate,
     * come with it), the duplicate freed before the wait: it still completes (as point-to-point
     * only: Open MPI 4.1's own nonblocking collectives can crash there) */
    if (p2p) {
        MPI_Comm tmp;
        MPI_Comm_dup(topo[1].comm, &tmp);
        args_t a;
        make_args(&topo[1], A2AV, &a);
        int *ds = (int *)(uintptr_t)b[0], *dr = (int *)(uintptr_t)b[1];
        for (int i = 0; i < ints; i++) hs[i] = rank * 100000 + 7 + i;
        memcpy(ds, hs, BUFSZ);
        memset(dr, 0xa5, BUFSZ);
        MPI_Request q;
        run(A2AV, 0, 1, ds, dr, &a, tmp, &q);
        MPI_Comm_free(&tmp);
        int rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        memset(hr, 0xa5, BUFSZ);
        run(A2AV, 1, 0, hs, hr, &a, topo[1].comm, NULL);
        if (rc != MPI_SUCCESS || memcmp(dr, hr, BUFSZ)) {
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            printf("rank %d: MPI_Ineighbor_alltoallv on a communicator freed before its wait: rc %d, %s\n", rank, rc,
                   memcmp(dr, hr, BUFSZ) ? "wrong data" : "right data");
        }
    }
    for (int t = 0; t < nt; t++) MPI_Comm_free(&topo[t].comm);
    unsigned long long (*sent)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_test_envelopes_sent");
    long long counts[2] = {failures, sent ? (long long)sent() : 0}, sums[2];
    MPI_Allreduce(counts, sums, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("neighbor_prog: %s (%d ranks, %s, %lld envelopes, %lld failures)\n", sums[0] ? "FAIL" : "ok", size,
               p2p ? "as point-to-point" : "the real MPI's", sums[1], sums[0]);
    const int sum = (int)sums[0];
    free(hs), free(hr), free(ref), free(hs2), free(hr2);
    MPI_Finalize();
    return sum ? 1 : 0;
}
