/* fuse_prog: small MPI_Iallreduce operations of one group sharing NCCL calls (NCCLMPI_FUSE) on
 * the stand-in CUDA driver and NCCL (test/unit/fuse.sh): at one rank, or at several where the
 * stand-in NCCL's shared-memory mode and a device per rank give them an NCCL communicator of
 * their own (FAKE_NCCL_SHM=1, FAKE_CUDA_DEVICE_PER_RANK=1; the stand-in aborts when the ranks'
 * NCCL calls differ, the script's time limit catches a rank left waiting).
 * Rounds of 48 operations, in an explicit ncclmpi_group_begin/end group or back to back
 * (automatic coalescing; in two rounds some ranks issue them apart, so that each rank's own
 * grouping differs and the coalescing rounds must reconcile them), whose buffers take every way into and out of a shared call: in place and
 * not, 1 to 20000 elements of int, double and unsigned char (padding, the largest fused size and
 * past it), sums and maxima (several calls); and, differing by rank, what must not change a rank's
 * plan: a strided vector type where other ranks pass the same ints contiguous, starts off 16-byte
 * boundaries (copied by the driver, not the copy kernel), receive buffers in host memory (through
 * a bounce buffer). Each output is poisoned first and must equal the reduction over the ranks,
 * computed on the host; a vector's gaps must stay untouched. Prints "fuse_prog: ok" with the
 * count of fused operations, which must be positive where NCCLMPI_FUSE says so: with `all`, and
 * with the default at two ranks or more; zero otherwise. */
#include <dlfcn.h>
#include <mpi.h>
#include <ncclmpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stand_in.h"

enum { K = 48, ROUNDS = 6, MAXN = 20000, SPAN = MAXN * 8 * 2 + 64, POISON = 0x5A };
static CUdeviceptr dbuf[2 * K + 1];
static int failures, rank, size;

typedef struct {
    int kind; /* 0 int, 1 double, 2 unsigned char */
    MPI_Datatype dt;
    MPI_Op op;
    int n, count, stride, inplace, skew, host_recv;
    size_t es, span;
    unsigned char *s, *r, *r_alloc, *want;
} fop_t;

/* element j of operation k on rank q */
static double value(int kind, int k, int j, int q, int round)
{
    if (kind == 2) return (k * 31 + j * 7 + q * 5 + round) % 256;
    return k * 1000 + j * 7 + q * 3 + round;
}

static void put(unsigned char *p, int kind, double v)
{
    if (kind == 0) {
        int x = (int)v;
        memcpy(p, &x, 4);
    } else if (kind == 1) {
        memcpy(p, &v, 8);
    } else {
        *p = (unsigned char)((unsigned)v & 0xFF);
    }
}

static void setup(fop_t *f, int k, int round)
{
    static const int counts[] = {1, 3, 7, 100, 1000, 16384, 16385, MAXN};
    f->kind = (k + round) % 3;
    const MPI_Datatype base = f->kind == 0 ? MPI_INT : f->kind == 1 ? MPI_DOUBLE : MPI_UNSIGNED_CHAR;
    f->es = f->kind == 0 ? 4 : f->kind == 1 ? 8 : 1;
    f->op = k < 36 ? MPI_SUM : MPI_MAX; /* (12 sums of each type: NCCLMPI_FUSE_MIN) */
    f->n = counts[(k * 5 + round) % 8];
    if (f->kind == 1 && f->n > 8192) f->n = 8192;
    f->inplace = k % 3 == 2;
    /* per rank */
    f->stride = f->kind == 0 && k % 4 == 1 && (rank + k / 4) % 2 == 0 ? 2 : 1;
    f->skew = (k + rank) % 4 == 3 ? (int)f->es : 0;
    f->host_recv = !f->inplace && (k + rank) % 8 == 4;
    if (f->stride > 1) {
        MPI_Type_vector(f->n, 1, f->stride, base, &f->dt);
        MPI_Type_commit(&f->dt);
        f->count = 1;
    } else {
        f->dt = base;
        f->count = f->n;
    }
    f->span = (size_t)f->n * f->es * f->stride;
    f->s = (unsigned char *)(uintptr_t)dbuf[k] + f->skew;
    f->r_alloc = f->host_recv ? malloc(SPAN) : (unsigned char *)(uintptr_t)dbuf[K + k];
    f->r = f->r_alloc + f->skew;
    f->want = malloc(f->span);
    unsigned char *in = f->inplace ? f->r : f->s;
    memset(f->r, POISON, f->span);
    memset(f->want, POISON, f->span);
    for (int j = 0; j < f->n; j++) {
        const size_t at = (size_t)j * f->es * f->stride;
        put(in + at, f->kind, value(f->kind, k, j, rank, round));
        double v = value(f->kind, k, j, 0, round);
        for (int q = 1; q < size; q++) {
            const double w = value(f->kind, k, j, q, round);
            v = f->op == MPI_SUM ? v + w : (w > v ? w : v);
        }
        put(f->want + at, f->kind, v); /* (sums of bytes wrap, as the reduction's do) */
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    void *drv = stand_in_driver("fuse_prog", 2 * K + 1, SPAN, dbuf);
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!drv || !gbegin || !gend || !route) {
        printf("fuse_prog: needs libncclmpi and the stand-in driver\n");
        MPI_Finalize();
        return 2;
    }
    static fop_t o[K];
    MPI_Request q[K];
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    int *one = (int *)(uintptr_t)dbuf[2 * K];  /* a blocking collective first: its NCCL communicator */
    *one = 1;
    MPI_Allreduce(MPI_IN_PLACE, one, 1, MPI_INT, MPI_SUM, c);
    if (*one != size) {
        fprintf(stderr, "fuse_prog: FAIL: the first MPI_Allreduce gave %d, expected %d\n", *one, size);
        failures++;
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < K; k++) setup(&o[k], k, round);
        const int explicit_group = round % 2 == 0;
        if (explicit_group) gbegin();
        for (int k = 0; k < K; k++) {
            /* back to back on some ranks, apart on others (past NCCLMPI_COALESCE_WINDOW: each
             * launched at its call): each rank groups by its own timing, the rounds make the
             * groups (and so the fused calls) the same on every rank */
            if ((round == 3 && rank % 2 == 1) || (round == 5 && rank % 2 == 0 && k % 2 == 0)) usleep(60);
            if (MPI_Iallreduce(o[k].inplace ? MPI_IN_PLACE : o[k].s, o[k].r, o[k].count, o[k].dt, o[k].op, c, &q[k]) != MPI_SUCCESS)
                failures++;
        }
        if (explicit_group) gend();
        if (MPI_Waitall(K, q, MPI_STATUSES_IGNORE) != MPI_SUCCESS) failures++;
        for (int k = 0; k < K; k++) {
            fop_t *f = &o[k];
            for (size_t i = 0; i < f->span; i++) {
                if (f->r[i] == f->want[i]) continue;
                if (failures++ < 10)
                    fprintf(stderr, "fuse_prog: FAIL: rank %d round %d (%s) op %d (%d x %s %s%s%s%s%s): byte %zu is %d, expected %d\n",
                            rank, round, explicit_group ? "explicit group" : "back to back", k, f->n,
                            f->kind == 0 ? "int" : f->kind == 1 ? "double" : "unsigned char", f->op == MPI_SUM ? "sum" : "max",
                            f->stride > 1 ? ", strided" : "", f->inplace ? ", in place" : "", f->skew ? ", unaligned" : "",
                            f->host_recv ? ", host receive" : "", i, f->r[i], f->want[i]);
                break;
            }
            free(f->want);
            if (f->stride > 1) MPI_Type_free(&f->dt);
            if (f->host_recv) free(f->r_alloc);
        }
    }
    MPI_Comm_free(&c);
    unsigned long long nccl = 0, fused = 0;
    route("Iallreduce", NCCLMPI_ROUTE_NCCL, &nccl);
    route("Iallreduce", NCCLMPI_ROUTE_FUSED, &fused);
    const char *mode = getenv("NCCLMPI_FUSE");
    const int expect = mode && !strcmp(mode, "all") ? 1 : mode && !strcmp(mode, "off") ? 0 : size >= 2;
    if (nccl != (unsigned long long)K * ROUNDS || (expect ? fused == 0 || fused >= nccl : fused != 0)) {
        fprintf(stderr, "fuse_prog: FAIL: rank %d: %llu MPI_Iallreduce on the NCCL route (of %d), %llu fused (NCCLMPI_FUSE=%s)\n",
                rank, nccl, K * ROUNDS, fused, mode ? mode : "exact");
        failures++;
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (all) return 1;
    if (rank == 0) printf("fuse_prog: ok (%d ranks; rank 0: %llu MPI_Iallreduce on the NCCL route, %llu fused)\n", size, nccl, fused);
    return 0;
}
