/* gpu_neighbor: neighbourhood collectives on device buffers (MPI_Neighbor_allgather(v),
 * MPI_Neighbor_alltoall(v/w) and their MPI_Ineighbor_ forms), on a periodic ring, a non-periodic 2-D
 * Cartesian grid (missing neighbours are MPI_PROC_NULL: their receive blocks must keep their
 * contents) and a distributed graph (two out-neighbours, the matching in-neighbours). Every call
 * runs with device send and receive buffers, and with one side on the host; the result is checked
 * against the real MPI's blocking form (PMPI_) on host copies of the same inputs, from the same
 * poisoned receive buffer. Per-neighbour counts of the v forms depend on the (sender, receiver)
 * pair. Where the real MPI runs the nonblocking forms (ncclmpi does not run them as point-to-point),
 * those on the ring of one or two ranks are left out: Open MPI 4.1's nonblocking calls pair the
 * blocks of a neighbour named twice otherwise than its blocking ones.
 *
 *   gpu_neighbor [--host] [--big]   (--host: malloc buffers only, label mpi; --big: blocks of 4-80 KiB)
 */
#include "gpu_common.h"

static int rank, size, failures, host_mode;
enum { AG, AGV, A2A, A2AV, A2AW, NCALL };
static const char *const call_name[NCALL] = {"allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw"};
static MPI_Datatype pair2; /* two ints as one element: alltoallw's odd blocks use it */
enum { K0 = 5, MAXN = 8 }; /* elements per block of the fixed-count forms; neighbours at most */
static int scale = 1;       /* --big: blocks 1024 times larger (4-80 KiB: envelopes where they are on) */
#define K (K0 * scale)

/* elements sender s sends to receiver r in the v forms (both sides compute it) */
static int pair_count(int s, int r) { return (1 + (s + 2 * r) % 4) * scale; }

typedef struct {
    MPI_Comm comm;
    const char *name;
    int nin, nout, in[MAXN], out[MAXN];
    int twice; /* a ring of one or two ranks: a neighbour named twice */
} topo_t;

static void neighbours(topo_t *t)
{
    int kind, w;
    MPI_Topo_test(t->comm, &kind);
    if (kind == MPI_CART) {
        int nd;
        MPI_Cartdim_get(t->comm, &nd);
        for (int d = 0; d < nd; d++) {
            int src, dst;
            MPI_Cart_shift(t->comm, d, 1, &src, &dst);
            t->in[2 * d] = t->out[2 * d] = src;
            t->in[2 * d + 1] = t->out[2 * d + 1] = dst;
        }
        t->nin = t->nout = 2 * nd;
    } else {
        int iw[MAXN], ow[MAXN];
        MPI_Dist_graph_neighbors_count(t->comm, &t->nin, &t->nout, &w);
        MPI_Dist_graph_neighbors(t->comm, t->nin, t->in, iw, t->nout, t->out, ow);
    }
}

/* whether ncclmpi runs comm's neighbourhood collectives as point-to-point (its test hook) */
static int as_p2p(MPI_Comm comm)
{
    int (*f)(MPI_Comm) = (int (*)(MPI_Comm))dlsym(RTLD_DEFAULT, "ncclmpi_test_neighbor_p2p");
    return f && f(comm);
}

/* one call: mpi = 1 through MPI_ (device or host buffers, maybe intercepted), 0 through PMPI_
 * (blocking: the reference) */
static int run(int mpi, int call, int nb, const topo_t *t, const int *sb, int *rb, const int *sc, const int *sd,
               const int *rc, const int *rd)
{
    /* alltoallw: block i in bytes at 4 * displacement, of MPI_INT or (odd i, even count) pair2 */
    MPI_Aint swd[MAXN], rwd[MAXN];
    MPI_Datatype swt[MAXN], rwt[MAXN];
    int swc[MAXN], rwc[MAXN];
    for (int i = 0; call == A2AW && i < t->nout; i++) {
        swd[i] = (MPI_Aint)sd[i] * 4;
        swt[i] = (i & 1) && !(sc[i] & 1) ? pair2 : MPI_INT;
        swc[i] = swt[i] == pair2 ? sc[i] / 2 : sc[i];
    }
    for (int i = 0; call == A2AW && i < t->nin; i++) {
        rwd[i] = (MPI_Aint)rd[i] * 4;
        rwt[i] = MPI_INT;
        rwc[i] = rc[i];
    }
    MPI_Request q = MPI_REQUEST_NULL;
    int rc_ = MPI_SUCCESS;
#define CALL(F, IF, ...) (mpi ? (nb ? MPI_##IF(__VA_ARGS__, &q) : MPI_##F(__VA_ARGS__)) : PMPI_##F(__VA_ARGS__))
    switch (call) {
    case AG: rc_ = CALL(Neighbor_allgather, Ineighbor_allgather, sb, K, MPI_INT, rb, K, MPI_INT, t->comm); break;
    case AGV: rc_ = CALL(Neighbor_allgatherv, Ineighbor_allgatherv, sb, sc[0], MPI_INT, rb, rc, rd, MPI_INT, t->comm); break;
    case A2A: rc_ = CALL(Neighbor_alltoall, Ineighbor_alltoall, sb, K, MPI_INT, rb, K, MPI_INT, t->comm); break;
    case A2AV: rc_ = CALL(Neighbor_alltoallv, Ineighbor_alltoallv, sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, t->comm); break;
    case A2AW: rc_ = CALL(Neighbor_alltoallw, Ineighbor_alltoallw, sb, swc, swd, swt, rb, rwc, rwd, rwt, t->comm); break;
    }
#undef CALL
    if (mpi && nb && rc_ == MPI_SUCCESS) rc_ = MPI_Wait(&q, MPI_STATUS_IGNORE);
    return rc_;
}

static void check_topo(const topo_t *t)
{
    /* counts and displacements: the v forms leave a gap of 2 elements after each block */
    int sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN], sn = 0, rn = 0;
    for (int call = 0; call < NCALL; call++) {
        const int v = call == AGV || call == A2AV || call == A2AW;
        sn = rn = 0;
        if (call == AGV) { /* one block to every out-neighbour: the count is the sender's own */
            sc[0] = sn = pair_count(rank, rank);
        } else {
            for (int i = 0; i < t->nout; i++) {
                const int dst = t->out[i];
                sc[i] = dst == MPI_PROC_NULL ? 3 : pair_count(rank, dst);
                sd[i] = sn;
                sn += sc[i] + 2;
            }
        }
        for (int i = 0; i < t->nin; i++) {
            const int src = t->in[i];
            rc[i] = src == MPI_PROC_NULL ? 3 : call == AGV ? pair_count(src, src) : pair_count(src, rank);
            rd[i] = rn;
            rn += rc[i] + 2;
        }
        const int scount = v ? sn : K * (call == AG ? 1 : t->nout), rcount = v ? rn : K * t->nin;
        int *hs = malloc((scount + 1) * sizeof(int)), *ref = malloc((rcount + 1) * sizeof(int)),
            *got = malloc((rcount + 1) * sizeof(int));
        for (int i = 0; i < scount; i++) hs[i] = rank * 1000 + i;
        for (int mem = 0; mem < (host_mode ? 1 : 3); mem++) {
            /* 0: device send + receive; 1: device send, host receive; 2: host send, device receive */
            const int skind = host_mode || mem == 2 ? MK_MALLOC : MK_DEV, rkind = host_mode || mem == 1 ? MK_MALLOC : MK_DEV;
            for (int nb = 0; nb < 2; nb++) {
                if (nb && t->twice && !as_p2p(t->comm)) continue; /* (see above) */
                for (int i = 0; i < rcount; i++) ref[i] = got[i] = -7 - i; /* poison, also the reference's */
                int *sbuf = mk_alloc(skind, (scount + 1) * sizeof(int)), *rbuf = mk_alloc(rkind, (rcount + 1) * sizeof(int));
                put_bytes(skind, sbuf, hs, scount * sizeof(int));
                put_bytes(rkind, rbuf, got, rcount * sizeof(int));
                int e1 = run(0, call, nb, t, hs, ref, sc, sd, rc, rd);
                int e2 = run(1, call, nb, t, sbuf, rbuf, sc, sd, rc, rd);
                get_bytes(rkind, got, rbuf, rcount * sizeof(int));
                GPU_CHECK(e1 == MPI_SUCCESS && e2 == MPI_SUCCESS, "%s %s%s: error %d / %d", t->name, nb ? "I" : "",
                          call_name[call], e1, e2);
                int bad = -1;
                for (int i = 0; i < rcount && bad < 0; i++)
                    if (got[i] != ref[i]) bad = i;
                GPU_CHECK(bad < 0, "%s MPI_%sneighbor_%s (send %s, receive %s): element %d = %d, the real MPI gives %d",
                          t->name, nb ? "I" : "", call_name[call], mk_name[skind], mk_name[rkind], bad, bad < 0 ? 0 : got[bad],
                          bad < 0 ? 0 : ref[bad]);
                mk_free(skind, sbuf);
                mk_free(rkind, rbuf);
            }
        }
        free(hs);
        free(ref);
        free(got);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--host")) host_mode = 1;
        else if (!strcmp(argv[i], "--big")) scale = 1024;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!host_mode) gpu_select(NULL);
    MPI_Type_contiguous(2, MPI_INT, &pair2);
    MPI_Type_commit(&pair2);
    topo_t t[3];
    memset(t, 0, sizeof(t));
    int dims1[1] = {size}, per1[1] = {1}, dims2[2] = {0, 0}, per2[2] = {0, 0};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims1, per1, 0, &t[0].comm);
    t[0].name = "ring";
    t[0].twice = size <= 2;
    MPI_Dims_create(size, 2, dims2);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims2, per2, 0, &t[1].comm);
    t[1].name = "2-D grid";
    int dsts[2] = {(rank + 1) % size, (rank + 2) % size}, srcs[2] = {(rank + size - 1) % size, (rank + 2 * size - 2) % size};
    int ones[2] = {1, 1};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, srcs, ones, 2, dsts, ones, MPI_INFO_NULL, 0, &t[2].comm);
    t[2].name = "dist graph";
    const int p2p = as_p2p(t[0].comm);
    for (int k = 0; k < 3; k++) {
        MPI_Comm_set_errhandler(t[k].comm, MPI_ERRORS_RETURN);
        neighbours(&t[k]);
        check_topo(&t[k]);
        MPI_Comm_free(&t[k].comm);
    }
    MPI_Type_free(&pair2);
    nm_stats_view_t st = gpu_stats("Neighbor_alltoall");
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("gpu_neighbor: %d ranks%s, ring / 2-D grid %dx%d / dist graph: %d failure(s); MPI_Neighbor_alltoall "
               "staged %llu; as point-to-point: %s\n", size, host_mode ? " (--host)" : "", dims2[0], dims2[1], total,
               st.calls == (unsigned long long)-1 ? 0ULL : st.route[NCCLMPI_ROUTE_STAGED], p2p ? "yes" : "no");
    MPI_Finalize();
    return total ? 1 : 0;
}
