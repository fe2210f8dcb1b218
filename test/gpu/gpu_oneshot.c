/* gpu_oneshot: small device MPI_Allreduce / MPI_Iallreduce over every predefined type and op MPI
 * defines on it (the logical and bitwise ops, MINLOC/MAXLOC on the pair types, 16-bit integers:
 * those NCCL lacks too), at counts from 1 element to past the one-shot limit, in place and not,
 * checked element by element against the real MPI on host copies of the same inputs; every rank
 * must also hold the same bits. Then the one-shot window's reuse: one-shot and NCCL-sized calls
 * alternating on one communicator, and two communicators used alternately.
 * With ncclmpi loaded and one GPU per rank, the small calls must have taken the one-shot route;
 * on shared GPUs, the staged one (the fallback); none either with NCCLMPI_ONESHOT=0 or NM_KERNELS=0
 * (a build without the kernels). --threads: two threads on two communicators at once instead
 * (MPI_THREAD_MULTIPLE). Usage: gpu_oneshot [--quick] [--threads] */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "gpu_common.h"

static int rank, size, failures;
#define CHECK(cond, ...) GPU_CHECK(cond, __VA_ARGS__)

typedef struct {
    MPI_Datatype t;
    const char *name;
    int cls; /* 0 integer, 1 float, 2 pair, 3 byte, 4 bool */
} tdesc_t;

typedef struct {
    MPI_Op op;
    const char *name;
} odesc_t;

static const odesc_t arith[] = {{MPI_SUM, "SUM"}, {MPI_PROD, "PROD"}, {MPI_MIN, "MIN"}, {MPI_MAX, "MAX"}};
static const odesc_t logic[] = {{MPI_LAND, "LAND"}, {MPI_LOR, "LOR"}, {MPI_LXOR, "LXOR"}};
static const odesc_t bits[] = {{MPI_BAND, "BAND"}, {MPI_BOR, "BOR"}, {MPI_BXOR, "BXOR"}};
static const odesc_t loc[] = {{MPI_MINLOC, "MINLOC"}, {MPI_MAXLOC, "MAXLOC"}};

/* element i of rank r's input, written into one element of type t at p */
static void put(const tdesc_t *d, char *p, int r, long i, int op_is_prod)
{
    long v = (r * 7 + i * 3) % 11 + 1;                  /* 1..11 */
    if (op_is_prod) v = (r + i) % 3 == 0 ? 2 : 1;       /* products stay small */
    long z = (r + i) % 4 == 0 ? 0 : v;                  /* zeros for the logical ops */
    MPI_Datatype ty = d->t;
#define PUT(T, x) do { T x_ = (T)(x); memcpy(p, &x_, sizeof(T)); } while (0)
    if (ty == MPI_INT8_T) PUT(int8_t, i % 5 == 0 ? -z : z);
    else if (ty == MPI_UINT8_T) PUT(uint8_t, z);
    else if (ty == MPI_SHORT) PUT(short, i % 5 == 0 ? -z : z);
    else if (ty == MPI_UNSIGNED_SHORT) PUT(unsigned short, z * 1000);
    else if (ty == MPI_INT) PUT(int, i % 5 == 0 ? -z * 100000 : z);
    else if (ty == MPI_UNSIGNED) PUT(unsigned, z * 300000000u);
    else if (ty == MPI_LONG) PUT(long, i % 5 == 0 ? -z : z << 40);
    else if (ty == MPI_UINT64_T) PUT(uint64_t, (uint64_t)z << 60 | (uint64_t)z);
    else if (ty == MPI_FLOAT) PUT(float, 1.0f + 0.1f * (float)v - (i % 7 == 0 ? 3.0f : 0.0f));
    else if (ty == MPI_DOUBLE) PUT(double, 1.0 + 0.1 * (double)v - (i % 7 == 0 ? 3.0 : 0.0));
    else if (ty == MPI_C_BOOL) PUT(_Bool, z != 0);
    else if (ty == MPI_BYTE) PUT(unsigned char, (unsigned char)(z * 37 + r));
    else if (ty == MPI_FLOAT_INT) { struct { float v; int i; } x = {(float)((r * 5 + i) % 4), r * 10 + (int)i}; memcpy(p, &x, sizeof(x)); }
    else if (ty == MPI_DOUBLE_INT) { struct { double v; int i; } x = {(double)((r * 5 + i) % 4), r * 10 + (int)i}; memcpy(p, &x, sizeof(x)); }
    else if (ty == MPI_LONG_INT) { struct { long v; int i; } x = {(r * 5 + i) % 4, r * 10 + (int)i}; memcpy(p, &x, sizeof(x)); }
    else if (ty == MPI_2INT) { struct { int v; int i; } x = {(int)((r * 5 + i) % 4), r * 10 + (int)i}; memcpy(p, &x, sizeof(x)); }
    else if (ty == MPI_SHORT_INT) { struct { short v; int i; } x = {(short)((r * 5 + i) % 4), r * 10 + (int)i}; memcpy(p, &x, sizeof(x)); }
#undef PUT
}

/* the bytes of element i that carry data (pair types have padding) */
static int same_elem(const tdesc_t *d, const char *a, const char *b, int *close)
{
    *close = 0;
    MPI_Datatype ty = d->t;
    if (ty == MPI_FLOAT) { float x, y; memcpy(&x, a, 4); memcpy(&y, b, 4); *close = fabsf(x - y) <= 1e-5f * (1 + fabsf(y)); return x == y; }
    if (ty == MPI_DOUBLE) { double x, y; memcpy(&x, a, 8); memcpy(&y, b, 8); *close = fabs(x - y) <= 1e-12 * (1 + fabs(y)); return x == y; }
    if (ty == MPI_FLOAT_INT) return !memcmp(a, b, 8);
    if (ty == MPI_DOUBLE_INT) return !memcmp(a, b, 8) && !memcmp(a + 8, b + 8, 4);
    if (ty == MPI_LONG_INT) return !memcmp(a, b, 8) && !memcmp(a + 8, b + 8, 4);
    if (ty == MPI_2INT) return !memcmp(a, b, 8);
    if (ty == MPI_SHORT_INT) return !memcmp(a, b, 2) && !memcmp(a + 4, b + 4, 4);
    int sz;
    MPI_Type_size(ty, &sz);
    return !memcmp(a, b, (size_t)sz);
}

static unsigned long long fnv(const unsigned char *p, size_t n)
{
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int cases;

/* one call on every rank of comm, checked */
static void run(MPI_Comm comm, const tdesc_t *d, const odesc_t *o, long count, int inplace, int nb)
{
    int cr;
    MPI_Comm_rank(comm, &cr);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(d->t, &lb, &ext);
    size_t bytes = (size_t)count * (size_t)ext;
    char *hin = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
    memset(hin, 0, bytes);
    for (long i = 0; i < count; i++) put(d, hin + i * ext, cr, i, o->op == MPI_PROD);
    /* the reference: the real MPI on host copies (ncclmpi passes host buffers through) */
    MPI_Allreduce(hin, want, (int)count, d->t, o->op, comm);
    char *din, *dout;
    CUDACHECK(cudaMalloc((void **)&din, bytes));
    CUDACHECK(cudaMalloc((void **)&dout, bytes));
    CUDACHECK(cudaMemcpy(din, hin, bytes, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(dout, 0xA5, bytes)); /* poison */
    if (inplace) CUDACHECK(cudaMemcpy(dout, hin, bytes, cudaMemcpyHostToDevice));
    const void *sb = inplace ? MPI_IN_PLACE : din;
    int rc;
    if (nb) {
        MPI_Request q;
        rc = MPI_Iallreduce(sb, dout, (int)count, d->t, o->op, comm, &q);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        rc = MPI_Allreduce(sb, dout, (int)count, d->t, o->op, comm);
    }
    CHECK(rc == MPI_SUCCESS, "%s %s count %ld: returned %d", d->name, o->name, count, rc);
    CUDACHECK(cudaMemcpy(got, dout, bytes, cudaMemcpyDeviceToHost));
    long bad = -1, inexact = 0;
    for (long i = 0; i < count && bad < 0; i++) {
        int close;
        if (!same_elem(d, got + i * ext, want + i * ext, &close)) {
            if (close) inexact++;
            else bad = i;
        }
    }
    CHECK(bad < 0, "%s %s count %ld %s%s: element %ld differs from the real MPI's result", d->name, o->name, count,
          inplace ? "in place" : "", nb ? " (Iallreduce)" : "", bad);
    /* every rank holds the same bits (pair types: padding aside, checked above) */
    if (d->cls != 2) {
        int sz;
        MPI_Type_size(d->t, &sz);
        unsigned long long h = 0;
        for (long i = 0; i < count; i++) {
            unsigned char e[32];
            memset(e, 0, sizeof(e));
            memcpy(e, got + i * ext, (size_t)sz);
            h = h * 31 + fnv(e, sizeof(e));
        }
        unsigned long long hmin, hmax;
        MPI_Allreduce(&h, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
        MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
        CHECK(hmin == hmax, "%s %s count %ld: the ranks' results differ", d->name, o->name, count);
    }
    cases++;
    cudaFree(din);
    cudaFree(dout);
    free(hin);
    free(want);
    free(got);
}

/* Reduce (variant 0: root last, 1: root 0, LAND on shorts), Reduce_scatter_block (2: in place),
 * Bcast (root variant % size), Allgather (3: in place), each against the real MPI on host copies;
 * odd variants use the nonblocking forms (in place excepted) */
static void other_colls(long count, int variant)
{
    const int n = (int)count;
    const int nb = variant & 1;
    const int root = variant % 2 ? 0 : size - 1;
    short *hs = malloc((size_t)n * size * sizeof(short)), *ws = malloc((size_t)n * size * sizeof(short));
    int *hi = malloc((size_t)n * size * sizeof(int)), *wi = malloc((size_t)n * size * sizeof(int));
    int *gi = malloc((size_t)n * size * sizeof(int));
    short *gs = malloc((size_t)n * size * sizeof(short));
    int *di, *ri;
    short *ds, *rs;
    CUDACHECK(cudaMalloc((void **)&di, (size_t)n * size * sizeof(int)));
    CUDACHECK(cudaMalloc((void **)&ri, (size_t)n * size * sizeof(int)));
    CUDACHECK(cudaMalloc((void **)&ds, (size_t)n * size * sizeof(short)));
    CUDACHECK(cudaMalloc((void **)&rs, (size_t)n * size * sizeof(short)));
    for (long i = 0; i < (long)n * size; i++) {
        hi[i] = rank * 31 + (int)i * 7 + variant;
        hs[i] = (short)((rank + i + variant) % 3 != 0);
    }
    /* Reduce: int SUM, and short LAND */
    MPI_Reduce(hi, wi, n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
    MPI_Reduce(hs, ws, n, MPI_SHORT, MPI_LAND, root, MPI_COMM_WORLD);
    CUDACHECK(cudaMemcpy(di, hi, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemcpy(ds, hs, (size_t)n * sizeof(short), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(ri, 0xA5, (size_t)n * sizeof(int)));
    CUDACHECK(cudaMemset(rs, 0xA5, (size_t)n * sizeof(short)));
    MPI_Request q[2];
    int rc, rc2;
    if (nb) {  /* the nonblocking forms, completed together */
        rc = MPI_Ireduce(di, ri, n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &q[0]);
        rc2 = MPI_Ireduce(ds, rs, n, MPI_SHORT, MPI_LAND, root, MPI_COMM_WORLD, &q[1]);
        if (rc == MPI_SUCCESS && rc2 == MPI_SUCCESS) rc = rc2 = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    } else {
        rc = MPI_Reduce(di, ri, n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
        rc2 = MPI_Reduce(ds, rs, n, MPI_SHORT, MPI_LAND, root, MPI_COMM_WORLD);
    }
    if (rank == root) {
        CUDACHECK(cudaMemcpy(gi, ri, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
        CUDACHECK(cudaMemcpy(gs, rs, (size_t)n * sizeof(short), cudaMemcpyDeviceToHost));
        CHECK(rc == MPI_SUCCESS && !memcmp(gi, wi, (size_t)n * sizeof(int)), "Reduce SUM count %d root %d", n, root);
        CHECK(rc2 == MPI_SUCCESS && !memcmp(gs, ws, (size_t)n * sizeof(short)), "Reduce LAND short count %d root %d", n, root);
    }
    cases += 2;
    /* Reduce_scatter_block: int SUM over size blocks of n */
    MPI_Reduce_scatter_block(hi, wi, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CUDACHECK(cudaMemcpy(di, hi, (size_t)n * size * sizeof(int), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(ri, 0xA5, (size_t)n * size * sizeof(int)));
    if (variant == 2) {
        rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, di, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CUDACHECK(cudaMemcpy(gi, di, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
    } else {
        rc = nb ? MPI_Ireduce_scatter_block(di, ri, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[0])
                : MPI_Reduce_scatter_block(di, ri, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        CUDACHECK(cudaMemcpy(gi, ri, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
    }
    CHECK(rc == MPI_SUCCESS && !memcmp(gi, wi, (size_t)n * sizeof(int)), "%sReduce_scatter_block count %d%s",
          nb ? "I" : "", n, variant == 2 ? " in place" : "");
    cases++;
    /* Bcast of ints from root */
    for (int i = 0; i < n; i++) wi[i] = root * 1000 + i * 3 + variant;
    for (int i = 0; i < n; i++) gi[i] = rank == root ? wi[i] : -1;
    CUDACHECK(cudaMemcpy(di, gi, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    rc = nb ? MPI_Ibcast(di, n, MPI_INT, root, MPI_COMM_WORLD, &q[0]) : MPI_Bcast(di, n, MPI_INT, root, MPI_COMM_WORLD);
    if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&q[0], MPI_STATUS_IGNORE);
    CUDACHECK(cudaMemcpy(gi, di, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(rc == MPI_SUCCESS && !memcmp(gi, wi, (size_t)n * sizeof(int)), "%sBcast count %d root %d", nb ? "I" : "", n, root);
    cases++;
    /* Allgather of ints */
    MPI_Allgather(hi, n, MPI_INT, wi, n, MPI_INT, MPI_COMM_WORLD);
    CUDACHECK(cudaMemset(ri, 0xA5, (size_t)n * size * sizeof(int)));
    if (variant == 3) {
        CUDACHECK(cudaMemcpy(ri + (size_t)rank * n, hi, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
        rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ri, n, MPI_INT, MPI_COMM_WORLD);
    } else {
        CUDACHECK(cudaMemcpy(di, hi, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
        rc = nb ? MPI_Iallgather(di, n, MPI_INT, ri, n, MPI_INT, MPI_COMM_WORLD, &q[0])
                : MPI_Allgather(di, n, MPI_INT, ri, n, MPI_INT, MPI_COMM_WORLD);
        if (nb && rc == MPI_SUCCESS) rc = MPI_Wait(&q[0], MPI_STATUS_IGNORE);
    }
    CUDACHECK(cudaMemcpy(gi, ri, (size_t)n * size * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(rc == MPI_SUCCESS && !memcmp(gi, wi, (size_t)n * size * sizeof(int)), "Allgather count %d%s", n,
          variant == 3 ? " in place" : "");
    cases++;
    cudaFree(di);
    cudaFree(ri);
    cudaFree(ds);
    cudaFree(rs);
    free(hs);
    free(ws);
    free(hi);
    free(wi);
    free(gi);
    free(gs);
}

/* --threads: two threads, each with its own communicator, run one-shot sums at once (even ranks
 * start thread 0 first, odd ranks thread 1); every result is checked */
typedef struct {
    MPI_Comm comm;
    int id, iters, bad, dev;
} thr_t;

static void *thr_main(void *arg)
{
    thr_t *t = arg;
    const int n = 257;
    CUDACHECK(cudaSetDevice(t->dev)); /* the current device is per host thread */
    int *h = malloc(n * sizeof(int)), *d, *r;
    CUDACHECK(cudaMalloc((void **)&d, n * sizeof(int)));
    CUDACHECK(cudaMalloc((void **)&r, n * sizeof(int)));
    for (int it = 0; it < t->iters && !t->bad; it++) {
        for (int i = 0; i < n; i++) h[i] = rank * 3 + i + it * 7 + t->id * 1000;
        CUDACHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
        CUDACHECK(cudaMemset(r, 0xA5, n * sizeof(int)));
        int rc = MPI_Allreduce(d, r, n, MPI_INT, MPI_SUM, t->comm);
        CUDACHECK(cudaMemcpy(h, r, n * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n && !t->bad; i++)
            if (rc != MPI_SUCCESS || h[i] != 3 * size * (size - 1) / 2 + size * (i + it * 7 + t->id * 1000)) t->bad = it + 1;
    }
    cudaFree(d);
    cudaFree(r);
    free(h);
    return NULL;
}

static int run_threads(int quick)
{
    thr_t t[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &t[k].comm);
        t[k].id = k;
        t[k].iters = quick ? 50 : 300;
        t[k].bad = 0;
        CUDACHECK(cudaGetDevice(&t[k].dev));
        /* the NCCL communicator (and the window) of each, made here with every rank present */
        int *x;
        CUDACHECK(cudaMalloc((void **)&x, 4 * sizeof(int)));
        CUDACHECK(cudaMemset(x, 0, 4 * sizeof(int)));
        MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_INT, MPI_SUM, t[k].comm);
        cudaFree(x);
    }
    nm_stats_view_t s0 = gpu_stats("Allreduce");
    int first = rank % 2;
    pthread_create(&th[first], NULL, thr_main, &t[first]);
    pthread_create(&th[1 - first], NULL, thr_main, &t[1 - first]);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    nm_stats_view_t s1 = gpu_stats("Allreduce");
    for (int k = 0; k < 2; k++) {
        CHECK(!t[k].bad, "thread %d: iteration %d wrong", k, t[k].bad - 1);
        MPI_Comm_free(&t[k].comm);
    }
    if (rank == 0 && s0.calls != (unsigned long long)-1)
        printf("gpu_oneshot: two threads, %llu one-shot calls\n", s1.oneshot - s0.oneshot);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_oneshot --threads: %d failure(s)\n", total);
    return total;
}

int main(int argc, char **argv)
{
    int threads = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--threads")) threads = 1;
    }
    int provided = MPI_THREAD_SINGLE;
    if (threads) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndev, distinct = gpu_select(&ndev);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (threads) {
        int total = 0;
        if (provided < MPI_THREAD_MULTIPLE) {
            if (rank == 0) printf("gpu_oneshot --threads: MPI_THREAD_MULTIPLE not provided (%d): skipped\n", provided);
        } else {
            total = run_threads(quick);
        }
        MPI_Finalize();
        return total ? 1 : provided < MPI_THREAD_MULTIPLE ? 77 : 0;
    }

    /* the NCCL communicator (and the one-shot window) is made at the first blocking device
     * collective NCCL can run */
    {
        float *x;
        CUDACHECK(cudaMalloc((void **)&x, 4 * sizeof(float)));
        CUDACHECK(cudaMemset(x, 0, 4 * sizeof(float)));
        MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        cudaFree(x);
    }
    nm_stats_view_t s0 = gpu_stats("Allreduce"), i0 = gpu_stats("Iallreduce");

    const tdesc_t types[] = {
        {MPI_INT8_T, "INT8_T", 0},   {MPI_UINT8_T, "UINT8_T", 0},  {MPI_SHORT, "SHORT", 0},
        {MPI_UNSIGNED_SHORT, "UNSIGNED_SHORT", 0}, {MPI_INT, "INT", 0}, {MPI_UNSIGNED, "UNSIGNED", 0},
        {MPI_LONG, "LONG", 0},       {MPI_UINT64_T, "UINT64_T", 0}, {MPI_FLOAT, "FLOAT", 1},
        {MPI_DOUBLE, "DOUBLE", 1},   {MPI_C_BOOL, "C_BOOL", 4},    {MPI_BYTE, "BYTE", 3},
        {MPI_FLOAT_INT, "FLOAT_INT", 2}, {MPI_DOUBLE_INT, "DOUBLE_INT", 2}, {MPI_LONG_INT, "LONG_INT", 2},
        {MPI_2INT, "2INT", 2},       {MPI_SHORT_INT, "SHORT_INT", 2},
    };
    const long counts_all[] = {1, 3, 7, 64, 1000, 4099};
    const int ncounts = quick ? 3 : 6;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const tdesc_t *d = &types[ti];
        const odesc_t *ops;
        int nops;
        switch (d->cls) {
        case 0: ops = NULL; nops = 10; break;
        case 1: ops = arith; nops = 4; break;
        case 2: ops = loc; nops = 2; break;
        case 3: ops = bits; nops = 3; break;
        default: ops = logic; nops = 3; break;
        }
        int sz;
        MPI_Type_size(d->t, &sz);
        for (int oi = 0; oi < nops; oi++) {
            const odesc_t *o = ops ? &ops[oi] : oi < 4 ? &arith[oi] : oi < 7 ? &logic[oi - 4] : &bits[oi - 7];
            for (int ci = 0; ci < ncounts; ci++) run(MPI_COMM_WORLD, d, o, counts_all[ci], ci & 1, ci == 2);
            /* the largest message of the one-shot path (64 KiB by default), and one element more */
            if (!quick) {
                run(MPI_COMM_WORLD, d, o, 65536 / sz, 0, 0);
                run(MPI_COMM_WORLD, d, o, 65536 / sz + 1, 1, 1);
            }
        }
    }
    nm_stats_view_t s1 = gpu_stats("Allreduce"), i1 = gpu_stats("Iallreduce");

    /* the other collectives of the one-shot path: Reduce, Reduce_scatter_block, Bcast, Allgather
     * and their nonblocking forms (int sums and a 16-bit LAND NCCL lacks; roots first and last; in
     * place and not) */
    static const char *const ofn[8] = {"Reduce", "Reduce_scatter_block", "Bcast", "Allgather",
                                       "Ireduce", "Ireduce_scatter_block", "Ibcast", "Iallgather"};
    nm_stats_view_t o0[8], o1[8];
    for (int k = 0; k < 8; k++) o0[k] = gpu_stats(ofn[k]);
    {
        const long ocounts[] = {1, 7, 1000, 4096};
        for (int ci = 0; ci < (quick ? 2 : 4); ci++)
            for (int variant = 0; variant < 4; variant++)
                other_colls(ocounts[ci], variant);
    }
    unsigned long long other_one = 0;
    for (int k = 0; k < 8; k++) {
        o1[k] = gpu_stats(ofn[k]);
        other_one += o1[k].oneshot - o0[k].oneshot;
    }

    /* window reuse: small (one-shot) and large (NCCL) calls alternating on one communicator, and
     * two communicators used alternately; values change every iteration */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    const int big = 1 << 18, iters = quick ? 50 : 300;
    int *hb = malloc(big * sizeof(int)), *db, *dr;
    CUDACHECK(cudaMalloc((void **)&db, big * sizeof(int)));
    CUDACHECK(cudaMalloc((void **)&dr, big * sizeof(int)));
    for (int it = 0; it < iters; it++) {
        int n = it % 3 == 2 ? big : 1 + (it * 37) % 4000;
        MPI_Comm c = it % 2 ? dup : MPI_COMM_WORLD;
        for (int i = 0; i < n; i++) hb[i] = rank * 1000 + i + it;
        CUDACHECK(cudaMemcpy(db, hb, n * sizeof(int), cudaMemcpyHostToDevice));
        CUDACHECK(cudaMemset(dr, 0xA5, n * sizeof(int)));
        int rc;
        if (it % 5 == 4) {
            MPI_Request q;
            rc = MPI_Iallreduce(db, dr, n, MPI_INT, MPI_SUM, c, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            rc = MPI_Allreduce(db, dr, n, MPI_INT, MPI_SUM, c);
        }
        CUDACHECK(cudaMemcpy(hb, dr, n * sizeof(int), cudaMemcpyDeviceToHost));
        long bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (hb[i] != 1000 * size * (size - 1) / 2 + size * (i + it)) bad = i;
        CHECK(rc == MPI_SUCCESS && bad < 0, "reuse iteration %d (count %d, %s): rc %d, element %ld wrong", it, n,
              c == dup ? "dup" : "world", rc, bad);
        if (bad >= 0) break;
    }
    MPI_Comm_free(&dup);

    /* communicators freed right after bursts of nonblocking calls (their agreement rounds may
     * still be in flight), each followed by a host collective on MPI_COMM_WORLD */
    for (int it = 0; it < 20; it++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Request q[3];
        for (int k = 0; k < 3; k++) MPI_Iallreduce(db + k * 64, dr + k * 64, 64, MPI_INT, MPI_SUM, c, &q[k]);
        int rc = MPI_Waitall(3, q, MPI_STATUSES_IGNORE);
        MPI_Comm_free(&c);
        int one = 1, n = 0;
        MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS && n == size, "free after a burst, iteration %d: rc %d, host sum %d", it, rc, n);
    }
    cudaFree(db);
    cudaFree(dr);
    free(hb);

    if (s0.calls != (unsigned long long)-1) {
        unsigned long long one = s1.oneshot - s0.oneshot + i1.oneshot - i0.oneshot + other_one;
        unsigned long long stg = s1.route[NCCLMPI_ROUTE_STAGED] - s0.route[NCCLMPI_ROUTE_STAGED] +
                                 i1.route[NCCLMPI_ROUTE_STAGED] - i0.route[NCCLMPI_ROUTE_STAGED];
        /* NM_KERNELS=0: a build without the kernels (the test registration says) */
        const char *os = getenv("NCCLMPI_ONESHOT"), *built = getenv("NM_KERNELS");
        int expect = distinct && size > 1 && !(os && os[0] == '0') && !(built && built[0] == '0');
        if (rank == 0)
            printf("gpu_oneshot: %d ranks, %s: %llu one-shot calls, %llu staged\n", size,
                   distinct ? "one GPU per rank" : "ranks share GPUs", one, stg);
        CHECK(expect ? one > 0 : one == 0, "one-shot calls: %llu (expected %s)", one, expect ? "some" : "none");
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_oneshot: %d cases per rank, %d failure(s)\n", cases, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
