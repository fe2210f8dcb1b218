/* gpu_fuse: groups of small nonblocking allreduces on device buffers, where ncclmpi packs those of
 * one NCCL type and op into one NCCL call (NCCLMPI_FUSE). Each round issues K MPI_Iallreduce in
 * an order every rank shares (seeded, the types in turn), inside ncclmpi_group_begin/end (explicit group)
 * or back to back (automatic coalescing), then one MPI_Waitall. The operations mix types (int,
 * unsigned char, long long, float, double), ops (sum, max, min), counts (1 to 20000 elements: a
 * 16-byte slot's padding, the NCCLMPI_FUSE_MAX boundary and past it), in-place and not; and, per
 * rank, what must not change a rank's plan: a buffer's start off 16-byte boundaries, a host receive
 * buffer, and where the calls run on NCCL, the same signature as another datatype (MPI_INT x 3n on
 * one rank, a contiguous type of 3 ints x n or a strided vector of ints on another: the gaps must
 * stay untouched).
 * Results are checked against a float64 host computation of the reduction over the ranks; the
 * outputs are poisoned first. Where ncclmpi ran the calls on NCCL, some must have been fused
 * (NCCLMPI_ROUTE_FUSED), as NCCLMPI_FUSE says. Usage: gpu_fuse [rounds] */
#include <stdint.h>

#include "gpu_common.h"

static int rank, size, failures;
/* derived datatypes with MPI_SUM/MAX/MIN: where ncclmpi runs the calls on NCCL (Open MPI's own
 * reductions, which the staged path uses, reject predefined ops on derived types) */
static int derived_ok;

enum { K = 64, POISON = 0xEE };
enum { T_INT, T_UCHAR, T_LLONG, T_FLOAT, T_DOUBLE, NT };
static MPI_Datatype types[NT]; /* (set in main) */
static const size_t tsz[NT] = {4, 1, 8, 4, 8};
static const char *const tname[NT] = {"int", "unsigned char", "long long", "float", "double"};

typedef struct {
    int t, opi, inplace, count; /* count: elements of the base type */
    int shape;                  /* 0: base type x count; 1: contiguous(3) x count/3; 2: vector stride 2 */
    int skew;                   /* bytes the buffers start past an allocation (per rank) */
    int host_recv;              /* receive buffer in malloc'ed memory (per rank) */
    char *s, *r;                /* where the data starts */
    void *s_alloc, *r_alloc;
    MPI_Datatype dt;
    int dcount;
    size_t span; /* bytes the data spans (vector: with its gaps) */
} op_t;

static MPI_Op ops3[3];
static const char *const opname[3] = {"sum", "max", "min"};

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* element j of op k on rank q, small enough that any sum over 4 ranks is exact in every type */
static double val(int k, int j, int q, int t)
{
    int v = (k * 7 + j * 3 + q * 11) % 53 + 1;
    if (t == T_FLOAT || t == T_DOUBLE) return v * 0.5;
    return v;
}

static double reduce_ref(int k, int j, int t, int opi)
{
    double a = val(k, j, 0, t);
    for (int q = 1; q < size; q++) {
        double b = val(k, j, q, t);
        a = opi == 0 ? a + b : opi == 1 ? (b > a ? b : a) : (b < a ? b : a);
    }
    return a;
}

static void put_elem(char *p, int t, double v)
{
    switch (t) {
    case T_INT: { int x = (int)v; memcpy(p, &x, 4); break; }
    case T_UCHAR: { unsigned char x = (unsigned char)v; *p = (char)x; break; }
    case T_LLONG: { long long x = (long long)v; memcpy(p, &x, 8); break; }
    case T_FLOAT: { float x = (float)v; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8);
    }
}

static double get_elem(const char *p, int t)
{
    switch (t) {
    case T_INT: { int x; memcpy(&x, p, 4); return x; }
    case T_UCHAR: return (unsigned char)*p;
    case T_LLONG: { long long x; memcpy(&x, p, 8); return (double)x; }
    case T_FLOAT: { float x; memcpy(&x, p, 4); return x; }
    default: { double x; memcpy(&x, p, 8); return x; }
    }
}

/* element j's byte offset in the op's layout */
static size_t at(const op_t *o, int j) { return (size_t)j * tsz[o->t] * (o->shape == 2 ? 2 : 1); }

static void setup(op_t *o, int k, int round, unsigned *seed)
{
    static const int counts[] = {1, 3, 5, 12, 100, 1000, 4096, 8192, 20000};
    /* every type in turn; sums mostly, so that each type's reach NCCLMPI_FUSE_MIN (8) */
    o->t = (k + round) % NT;
    o->opi = k < 48 ? 0 : (int)(rnd(seed) % 3);
    if (o->t == T_UCHAR) o->opi = 1 + (int)(rnd(seed) % 2); /* (sums of bytes would wrap) */
    o->count = counts[rnd(seed) % (sizeof(counts) / sizeof(counts[0]))];
    if (o->t == T_LLONG || o->t == T_DOUBLE) o->count = o->count > 8192 ? 8192 : o->count; /* 64 KiB */
    if (k < 2) { /* ints: exactly 64 KiB, the largest fused by default, and one element more */
        o->t = T_INT;
        o->count = 16384 + k;
    }
    o->inplace = (int)(rnd(seed) % 3 == 0);
    /* per rank: what each rank may choose on its own */
    unsigned mine = *seed ^ (unsigned)(rank * 7919 + 1);
    o->shape = !derived_ok || o->t != T_INT ? 0 : o->count % 3 == 0 ? (int)(rnd(&mine) % 3) : (int)(rnd(&mine) % 2) * 2;
    o->skew = rnd(&mine) % 3 == 0 ? (int)tsz[o->t] : 0;
    o->host_recv = !o->inplace && rnd(&mine) % 8 == 0;
    if (o->shape == 1) {
        MPI_Type_contiguous(3, MPI_INT, &o->dt);
        MPI_Type_commit(&o->dt);
        o->dcount = o->count / 3;
    } else if (o->shape == 2) {
        MPI_Type_vector(o->count, 1, 2, MPI_INT, &o->dt);
        MPI_Type_commit(&o->dt);
        o->dcount = 1;
    } else {
        o->dt = types[o->t];
        o->dcount = o->count;
    }
    o->span = o->count ? at(o, o->count - 1) + tsz[o->t] : 0;
    o->s_alloc = mk_alloc(MK_DEV, o->span + 16);
    o->r_alloc = mk_alloc(o->host_recv ? MK_MALLOC : MK_DEV, o->span + 16);
    o->s = (char *)o->s_alloc + o->skew;
    o->r = (char *)o->r_alloc + o->skew;
    /* send data (or, in place, the receive buffer's), the receive buffer poisoned */
    char *h = malloc(o->span + 16);
    memset(h, POISON, o->span + 16);
    for (int j = 0; j < o->count; j++) put_elem(h + at(o, j), o->t, val(k, j, rank, o->t));
    put_bytes(MK_DEV, o->inplace ? o->r : o->s, h, o->span);
    if (!o->inplace) {
        memset(h, POISON, o->span + 16);
        put_bytes(o->host_recv ? MK_MALLOC : MK_DEV, o->r, h, o->span);
    }
    free(h);
}

static void check_free(op_t *o, int k, const char *how, int round)
{
    char *h = malloc(o->span + 16);
    get_bytes(o->host_recv ? MK_MALLOC : MK_DEV, h, o->r, o->span);
    int bad = 0;
    for (int j = 0; j < o->count && bad < 3; j++) {
        const double want = reduce_ref(k, j, o->t, o->opi), got = get_elem(h + at(o, j), o->t);
        if (got != want) {
            GPU_CHECK(0, "%s round %d op %d (%s %s x %d, shape %d, %s, skew %d%s): element %d is %g, expected %g", how,
                      round, k, tname[o->t], opname[o->opi], o->count, o->shape, o->inplace ? "in place" : "out of place",
                      o->skew, o->host_recv ? ", host receive buffer" : "", j, got, want);
            bad++;
        }
        /* a vector's gaps are not its data: untouched */
        if (o->shape == 2 && j + 1 < o->count && (unsigned char)h[at(o, j) + 4] != POISON) {
            GPU_CHECK(0, "%s round %d op %d: the gap after element %d was written", how, round, k, j);
            bad++;
        }
    }
    free(h);
    if (o->shape) MPI_Type_free(&o->dt);
    mk_free(MK_DEV, o->s_alloc);
    mk_free(o->host_recv ? MK_MALLOC : MK_DEV, o->r_alloc);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int rounds = argc > 1 ? atoi(argv[1]) : 12;
    types[T_INT] = MPI_INT;
    types[T_UCHAR] = MPI_UNSIGNED_CHAR;
    types[T_LLONG] = MPI_LONG_LONG;
    types[T_FLOAT] = MPI_FLOAT;
    types[T_DOUBLE] = MPI_DOUBLE;
    ops3[0] = MPI_SUM;
    ops3[1] = MPI_MAX;
    ops3[2] = MPI_MIN;
    gpu_select(NULL);
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    static op_t o[K];
    MPI_Request q[K];
    {  /* a blocking collective on the new communicator: its NCCL communicator, where there is one */
        int *d = mk_alloc(MK_DEV, sizeof(int)), one = 1;
        put_bytes(MK_DEV, d, &one, sizeof(int));
        MPI_Allreduce(MPI_IN_PLACE, d, 1, MPI_INT, MPI_SUM, c);
        get_bytes(MK_DEV, &one, d, sizeof(int));
        GPU_CHECK(one == size, "the first MPI_Allreduce gave %d, expected %d", one, size);
        mk_free(MK_DEV, d);
        nm_stats_view_t a = gpu_stats("Allreduce");
        derived_ok = a.calls != (unsigned long long)-1 && a.route[NCCLMPI_ROUTE_NCCL] > 0;
    }
    for (int round = 0; round < rounds; round++) {
        const int explicit_group = round % 2 == 0 && gbegin && gend;
        const char *how = explicit_group ? "explicit group" : "back to back";
        unsigned seed = 1234567u + (unsigned)round * 7777u; /* the same on every rank */
        for (int k = 0; k < K; k++) setup(&o[k], k, round, &seed);
        CUDACHECK(cudaDeviceSynchronize());
        MPI_Barrier(c);
        if (explicit_group) gbegin();
        for (int k = 0; k < K; k++) {
            int rc = MPI_Iallreduce(o[k].inplace ? MPI_IN_PLACE : o[k].s, o[k].r, o[k].dcount, o[k].dt, ops3[o[k].opi], c, &q[k]);
            GPU_CHECK(rc == MPI_SUCCESS, "%s round %d: MPI_Iallreduce %d returned %d", how, round, k, rc);
        }
        if (explicit_group) gend();
        int rc = MPI_Waitall(K, q, MPI_STATUSES_IGNORE);
        GPU_CHECK(rc == MPI_SUCCESS, "%s round %d: MPI_Waitall returned %d", how, round, rc);
        for (int k = 0; k < K; k++) check_free(&o[k], k, how, round);
    }
    /* where the NCCL route ran them, the integer ones shared calls (NCCLMPI_FUSE=exact: on
     * communicators of two ranks or more; all: also of one; off: never) */
    nm_stats_view_t v = gpu_stats("Iallreduce");
    unsigned long long fused = 0;
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (route) route("Iallreduce", NCCLMPI_ROUTE_FUSED, &fused);
    const char *mode = getenv("NCCLMPI_FUSE");
    const int expect = mode && !strcmp(mode, "all") ? 1 : mode && !strcmp(mode, "off") ? 0 : size >= 2;
    if (v.calls != (unsigned long long)-1 && v.route[NCCLMPI_ROUTE_NCCL] > 0)
        GPU_CHECK(expect ? fused > 0 : fused == 0, "%llu of %llu MPI_Iallreduce on NCCL were fused (NCCLMPI_FUSE=%s, %d ranks)",
                  fused, v.route[NCCLMPI_ROUTE_NCCL], mode ? mode : "exact", size);
    MPI_Comm_free(&c);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf("gpu_fuse: %d ranks, %d rounds of %d: ok (rank 0: %llu on NCCL, %llu fused)\n", size, rounds, K,
                   v.calls == (unsigned long long)-1 ? 0ull : v.route[NCCLMPI_ROUTE_NCCL], fused);
        else
            printf("gpu_fuse: %d failure(s)\n", all);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
