/* shared_coll: the blocking collectives of ranks that share a GPU, through ncclmpi's device window
 * (src/core/tl/shared/), on the stand-in CUDA driver (test/unit/fake_cuda.c with FAKE_CUDA_IPC=1,
 * whose memory other processes open through its CUDA IPC, and FAKE_CUDA_KERNELS=1, whose copy and
 * reduction kernels run in the caller). Every rank uses the stand-in's GPU 0, so the ranks share it;
 * run with NCCLMPI_SHARED_MIN=0 and NCCLMPI_SHARED_SLOT=64K (test/unit/shared_coll.sh): every call
 * below takes the window, large ones in several chunks.
 *
 * Every case runs the call on the stand-in's device memory (intercepted) and the real MPI's call
 * (PMPI_*) on host copies of the same inputs; both outputs start from the same poison and must end
 * byte-identical (gaps between blocks included). The calls: Allreduce, Reduce, Scan, Exscan,
 * Reduce_scatter_block, Reduce_scatter (blocks of different sizes, one empty), Bcast, Allgather,
 * Allgatherv (blocks of different sizes with gaps, one empty), Gather, Scatter, Alltoall; roots 0
 * and n-1; MPI_IN_PLACE wherever MPI allows it; ints, doubles and 8-bit integers with several ops,
 * a non-contiguous type for the calls that move data, and ranks that move the same signature
 * with different types (odd ranks 2c ints, even ranks c pairs of ints); counts from one element
 * to several slots. At the end every call must have run on the window (ncclmpi's route counters).
 * First, communicators made and freed in a loop (churn(); alone with SHARED_COLL_ONLY=churn), whose windows later
 * communicators of the same processes in the same order take over.
 * Prints "shared_coll: ok" when every rank passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/stand_in.h"
#include "ncclmpi.h"

enum { NBUF = 4, BUFSZ = 4 << 20, MAXR = 32 };
enum { ALLREDUCE, REDUCE, SCAN, EXSCAN, RSB, RS, BCAST, ALLGATHER, ALLGATHERV, GATHER, SCATTER, ALLTOALL, NK };
static const char *const kname[NK] = {"Allreduce", "Reduce", "Scan", "Exscan", "Reduce_scatter_block", "Reduce_scatter",
                                      "Bcast", "Allgather", "Allgatherv", "Gather", "Scatter", "Alltoall"};
static int rank, size, failures, cases;
static MPI_Comm cm; /* the communicator of the calls (MPI_COMM_WORLD but in churn()) */
static CUdeviceptr bufs[NBUF];

static int reduction(int k) { return k <= RS; }

/* element counts of a case: what this rank sends and receives (in elements of the type, gaps
 * included), and the per-rank counts and displacements of the v forms */
typedef struct {
    int k, c, root, inplace;
    MPI_Datatype t;
    MPI_Op op;
    int counts[MAXR], displs[MAXR];
    size_t s, r;
} case_t;

static void layout(case_t *x)
{
    const int n = size, c = x->c;
    int at = 0;
    for (int q = 0; q < n; q++) {
        /* Allgatherv: blocks of c + q elements, rank 1's empty, one element of gap after each;
         * Reduce_scatter: c or c + 3 elements, rank 1's empty */
        x->counts[q] = q == 1 ? 0 : x->k == ALLGATHERV ? c + q : c + 3 * (q % 2);
        x->displs[q] = at;
        at += x->counts[q] + (x->k == ALLGATHERV);
    }
    switch (x->k) {
    case ALLGATHER: case GATHER: x->s = c; x->r = (size_t)c * n; break;
    case SCATTER: x->s = (size_t)c * n; x->r = c; break;
    case ALLTOALL: x->s = x->r = (size_t)c * n; break;
    case RSB: x->s = (size_t)c * n; x->r = x->inplace ? x->s : (size_t)c; break;
    case RS: x->s = (size_t)at; x->r = x->inplace ? x->s : (size_t)x->counts[rank]; break;
    case ALLGATHERV: x->s = x->counts[rank]; x->r = (size_t)at; break;
    default: x->s = x->r = c; break;
    }
}

/* one call on (s, r): through ncclmpi (pm = 0) or the real MPI (pm = 1) */
#define CALL(pm, name, ...) ((pm) ? PMPI_##name(__VA_ARGS__) : MPI_##name(__VA_ARGS__))
static int run(const case_t *x, int pm, void *s, void *r)
{
    const MPI_Comm w = cm;
    void *sb = x->inplace ? MPI_IN_PLACE : s;
    switch (x->k) {
    case ALLREDUCE: return CALL(pm, Allreduce, sb, r, x->c, x->t, x->op, w);
    case REDUCE: return CALL(pm, Reduce, rank == x->root ? sb : s, r, x->c, x->t, x->op, x->root, w);
    case SCAN: return CALL(pm, Scan, sb, r, x->c, x->t, x->op, w);
    case EXSCAN: return CALL(pm, Exscan, sb, r, x->c, x->t, x->op, w);
    case RSB: return CALL(pm, Reduce_scatter_block, sb, r, x->c, x->t, x->op, w);
    case RS: return CALL(pm, Reduce_scatter, sb, r, x->counts, x->t, x->op, w);
    case BCAST: return CALL(pm, Bcast, r, x->c, x->t, x->root, w);
    case ALLGATHER: return CALL(pm, Allgather, sb, x->c, x->t, r, x->c, x->t, w);
    case ALLGATHERV: return CALL(pm, Allgatherv, sb, x->counts[rank], x->t, r, x->counts, x->displs, x->t, w);
    case GATHER: return CALL(pm, Gather, rank == x->root ? sb : s, x->c, x->t, r, x->c, x->t, x->root, w);
    case SCATTER:
        return CALL(pm, Scatter, s, x->c, x->t, x->inplace && rank == x->root ? MPI_IN_PLACE : r, x->c, x->t, x->root, w);
    default: return CALL(pm, Alltoall, sb, x->c, x->t, r, x->c, x->t, w);
    }
}

/* the input value of element i (basic elements) of rank q: small, so that sums and products of a
 * few ranks stay exact and 8-bit sums do not wrap */
static int val(int q, size_t i) { return (int)((i * 7 + (size_t)q * 3) % 5) - 2 + (q & 1); }

static void fill(MPI_Datatype t, void *p, size_t bytes, int q)
{
    if (t == MPI_DOUBLE)
        for (size_t i = 0; i < bytes / 8; i++) ((double *)p)[i] = val(q, i);
    else if (t == MPI_INT8_T)
        for (size_t i = 0; i < bytes; i++) ((int8_t *)p)[i] = (int8_t)val(q, i);
    else
        for (size_t i = 0; i < bytes / 4; i++) ((int *)p)[i] = val(q, i) * 1000 + (int)i;
}

static void run_case(case_t *x)
{
    layout(x);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(x->t, &lb, &ext);
    const size_t sb = x->s * (size_t)ext, rb = x->r * (size_t)ext;
    if (sb + 64 > BUFSZ || rb + 64 > BUFSZ) return;
    const MPI_Datatype basic = x->t == MPI_DOUBLE || x->t == MPI_INT8_T ? x->t : MPI_INT;
    char *ds = (char *)(uintptr_t)bufs[0], *dr = (char *)(uintptr_t)bufs[1];
    char *hs = malloc(sb + 1), *hr = malloc(rb + 1);
    /* inputs (the receive buffer too: in place, and the root's own block of Gather) */
    fill(basic, hs, sb, rank);
    memset(hr, 0xAB, rb);
    if (x->inplace || x->k == BCAST) fill(basic, hr, rb, rank + 7 * (x->k == BCAST && rank != x->root));
    memcpy(ds, hs, sb);
    memcpy(dr, hr, rb);
    cases++;
    const int e1 = run(x, 0, ds, dr), e2 = run(x, 1, hs, hr);
    /* Exscan leaves rank 0's result undefined; in place, Reduce_scatter(_block) defines the rank's
     * own block only; a non-root's receive buffer of Reduce and Gather means nothing */
    size_t cmp = rb;
    if ((x->k == EXSCAN && rank == 0) || ((x->k == REDUCE || x->k == GATHER) && rank != x->root)) cmp = 0;
    if ((x->k == RS || x->k == RSB) && x->inplace) cmp = (size_t)(x->k == RSB ? x->c : x->counts[rank]) * (size_t)ext;
    size_t bad = cmp;
    for (size_t i = 0; i < cmp && bad == cmp; i++)
        if (dr[i] != hr[i]) bad = i;
    if (e1 != MPI_SUCCESS || e2 != MPI_SUCCESS || bad != cmp) {
        char tn[MPI_MAX_OBJECT_NAME] = "";
        int l;
        MPI_Type_get_name(x->t, tn, &l);
        fprintf(stderr, "shared_coll: [rank %d] FAIL MPI_%s %s count=%d root=%d inplace=%d: rc %d/%d, first difference at byte %zu of %zu "
                "(0x%02x, real MPI 0x%02x)\n", rank, kname[x->k], tn, x->c, x->root, x->inplace, e1, e2, bad, cmp,
                bad < cmp ? (unsigned char)dr[bad] : 0, bad < cmp ? (unsigned char)hr[bad] : 0);
        failures++;
    }
    free(hs);
    free(hr);
}

/* Communicators made, used and freed in a loop, two at a time: a later one takes over the window of
 * a freed one of the same processes in the same order (NCCLMPI_COMM_CACHE), while one with the ranks
 * reversed or of half of them must make its own (Scan, Exscan, Allgatherv and Alltoall would show a
 * window of another order). With SHARED_COLL_CACHE_BY_RANK=1 rank 0 keeps one window, the others
 * two, so that the ranks offer different ones. */
static void churn(void)
{
    int wr, wn;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &wn);
    const int kinds[] = {SCAN, EXSCAN, ALLGATHERV, ALLTOALL, ALLREDUCE, REDUCE};
    for (int it = 0; it < 16; it++) {
        MPI_Comm a, b;
        switch (it % 4) {
        case 0: MPI_Comm_dup(MPI_COMM_WORLD, &a); break;
        case 1: MPI_Comm_split(MPI_COMM_WORLD, 0, wr, &a); break;          /* the same order */
        case 2: MPI_Comm_split(MPI_COMM_WORLD, 0, wn - wr, &a); break;     /* reversed */
        default: MPI_Comm_split(MPI_COMM_WORLD, wr % 2, wr, &a); break;    /* halves */
        }
        MPI_Comm_dup(it % 2 ? a : MPI_COMM_WORLD, &b);
        for (int use = 0; use < 2; use++) {
            cm = use ? b : a;
            MPI_Comm_rank(cm, &rank);
            MPI_Comm_size(cm, &size);
            for (int ki = 0; ki < 6; ki++) {
                const int k = kinds[(ki + it + use) % 6];
                case_t x = {k, ki % 2 ? 7 : 40000, size - 1, 0, MPI_INT, k == ALLGATHERV || k == ALLTOALL ? MPI_OP_NULL : MPI_SUM,
                            {0}, {0}, 0, 0};
                run_case(&x);
            }
        }
        MPI_Comm_free(&a); /* (collective: the same order on every rank) */
        MPI_Comm_free(&b);
    }
    cm = MPI_COMM_WORLD;
    rank = wr;
    size = wn;
}

int main(int argc, char **argv)
{
    /* ncclmpi reads its settings when it is loaded: a rank's own one takes a new image */
    const char *wrank = getenv("OMPI_COMM_WORLD_RANK"), *by_rank = getenv("SHARED_COLL_CACHE_BY_RANK");
    if (!wrank) wrank = getenv("PMI_RANK");  /* (MPICH's Hydra) */
    if (by_rank && *by_rank == '1' && wrank) {
        setenv("NCCLMPI_COMM_CACHE", atoi(wrank) == 0 ? "1" : "2", 1);
        setenv("SHARED_COLL_CACHE_BY_RANK", "done", 1);
        execv("/proc/self/exe", argv);
        perror("shared_coll: execv");
        return 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cm = MPI_COMM_WORLD;
    const char *only = getenv("SHARED_COLL_ONLY");
    const int churn_only = only && !strcmp(only, "churn");
    void *drv = stand_in_driver("shared_coll", NBUF, BUFSZ, bufs);
    int (*routes)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!drv || !routes || size > MAXR) {
        if (rank == 0) printf("shared_coll: skipped (no stand-in driver, no ncclmpi, or more than %d ranks)\n", MAXR);
        MPI_Finalize();
        return 77;
    }
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec); /* 2 ints of 3: the real MPI's and ncclmpi's packing */
    MPI_Type_commit(&vec);
    MPI_Type_set_name(vec, "vector(2,1,2,INT)");
    const MPI_Datatype red_t[] = {MPI_INT, MPI_INT, MPI_INT, MPI_DOUBLE, MPI_INT8_T};
    const MPI_Op red_op[] = {MPI_SUM, MPI_MAX, MPI_BXOR, MPI_SUM, MPI_SUM};
    const MPI_Datatype move_t[] = {MPI_INT, MPI_DOUBLE, vec};
    const int counts[] = {1, 7, 40000}; /* 40000 ints: 160 KB, several 64 KiB chunks */
    churn();
    for (int k = 0; k < NK && !churn_only; k++) {
        const int nt = reduction(k) ? 5 : 3;
        for (int ti = 0; ti < nt; ti++)
            for (int ci = 0; ci < 3; ci++)
                for (int ip = 0; ip < 2; ip++) {
                    if (ip && k == BCAST) continue;
                    for (int ri = 0; ri < (k == REDUCE || k == BCAST || k == GATHER || k == SCATTER ? 2 : 1); ri++) {
                        case_t x = {k, counts[ci], ri ? size - 1 : 0, ip, reduction(k) ? red_t[ti] : move_t[ti],
                                    reduction(k) ? red_op[ti] : MPI_OP_NULL, {0}, {0}, 0, 0};
                        run_case(&x);
                    }
                }
    }
    /* per-rank layouts of one signature: odd ranks move 2c MPI_INTs, even ranks c pairs of them
     * (a contiguous type), so every rank must still make the same chunks */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Type_set_name(pair, "contiguous(2,INT)");
    const int movers[] = {BCAST, ALLGATHER, GATHER, SCATTER, ALLTOALL};
    for (int m = 0; m < 5 && !churn_only; m++)
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 2; ri++) {
                const int odd = rank % 2, c = counts[ci] / 2 + 1;
                case_t x = {movers[m], odd ? 2 * c : c, ri ? size - 1 : 0, 0, odd ? MPI_INT : pair, MPI_OP_NULL, {0}, {0}, 0, 0};
                run_case(&x);
            }
    MPI_Type_free(&pair);
    /* every call ran on the window: the route counters of ncclmpi (ranks share the stand-in's GPU 0);
     * with SHARED_COLL_ROUTE=nccl (a GPU per rank and the stand-in NCCL's several-rank mode: the
     * NCCL bodies against the real MPI) every kind but the scans ran on NCCL */
    const char *want = getenv("SHARED_COLL_ROUTE");
    const int nccl = want && !strcmp(want, "nccl");
    for (int k = 0; k < NK && size > 1 && !churn_only; k++) {
        unsigned long long n = 0;
        if (nccl && (k == SCAN || k == EXSCAN)) continue;
        routes(kname[k], nccl ? NCCLMPI_ROUTE_NCCL : NCCLMPI_ROUTE_IPC, &n);
        if (n == 0) {
            fprintf(stderr, "shared_coll: [rank %d] FAIL no MPI_%s ran on %s\n", rank, kname[k],
                    nccl ? "the NCCL route" : "the shared GPU's window");
            failures++;
        }
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Type_free(&vec);
    if (rank == 0) {
        printf("shared_coll: %d ranks, %d cases per rank, %d failure(s)\n", size, cases, total);
        if (!total) printf("shared_coll: ok\n");
    }
    MPI_Finalize();
    return total ? 1 : 0;
}
