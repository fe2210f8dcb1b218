/* fuse_prog: small MPI_Iallreduce operations of one group sharing NCCL calls (NCCLMPI_FUSE) on
 * the stand-in CUDA driver and NCCL (one rank: the reduction is the input; test/unit/fuse.sh).
 * Rounds of 48 operations, in an explicit ncclmpi_group_begin/end group or back to back
 * (automatic coalescing), whose buffers take every way into and out of a shared call: in place
 * and not, starts off 16-byte boundaries (copied by the driver, not the copy kernel), a strided
 * vector type (packed and unpacked around the call), a receive buffer in host memory (through a
 * bounce buffer), 1 to 20000 elements of int, double and unsigned char (padding, and the largest
 * fused size and past it), sums and maxima mixed (several calls). Each output is poisoned first and
 * must equal its input; a vector's gaps must stay untouched. Prints "fuse_prog: ok" with the
 * count of fused operations, which must be positive with NCCLMPI_FUSE=all and zero otherwise (the
 * default leaves one-rank communicators alone). */
#include <dlfcn.h>
#include <mpi.h>
#include <ncclmpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { K = 48, ROUNDS = 6, SPAN = 20000 * 8 * 2 + 64, POISON = 0x5A };
static CUdeviceptr dbuf[2 * K];
static int failures;

typedef struct {
    MPI_Datatype t, dt;
    MPI_Op op;
    int n, count, stride, inplace, skew, host_recv;
    size_t es;
    unsigned char *s, *r, *r_alloc;
    unsigned char *want; /* the receive buffer's expected bytes (one rank: the input, gaps poisoned) */
} fop_t;

static unsigned char byte_of(int k, size_t i, int round) { return (unsigned char)((k * 131 + i * 7 + round * 17) % 251 + 1); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    void *drv = stand_in_driver("fuse_prog", 2 * K, SPAN, dbuf);
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!drv || !gbegin || !gend || !route) {
        printf("fuse_prog: needs libncclmpi and the stand-in driver\n");
        MPI_Finalize();
        return 2;
    }
    static const int counts[] = {1, 3, 7, 100, 1000, 16384, 16385, 20000};
    static fop_t o[K];
    MPI_Request q[K];
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Allreduce(MPI_IN_PLACE, (void *)(uintptr_t)dbuf[0], 1, MPI_INT, MPI_SUM, c);  /* its NCCL communicator */
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < K; k++) {
            fop_t *f = &o[k];
            const int kind = (k + round) % 3;
            f->t = kind == 0 ? MPI_INT : kind == 1 ? MPI_DOUBLE : MPI_UNSIGNED_CHAR;
            f->es = kind == 0 ? 4 : kind == 1 ? 8 : 1;
            f->op = k < 36 ? MPI_SUM : MPI_MAX; /* (12 sums of each type: NCCLMPI_FUSE_MIN) */
            f->n = counts[(k * 5 + round) % 8];
            if (kind == 1 && f->n > 8192) f->n = 8192;
            f->stride = kind == 0 && k % 4 == 1 ? 2 : 1;
            f->inplace = k % 3 == 2;
            f->skew = k % 4 == 3 ? (int)f->es : 0;
            f->host_recv = !f->inplace && k % 8 == 4;
            if (f->stride > 1) {
                MPI_Type_vector(f->n, 1, f->stride, f->t, &f->dt);
                MPI_Type_commit(&f->dt);
                f->count = 1;
            } else {
                f->dt = f->t;
                f->count = f->n;
            }
            f->s = (unsigned char *)(uintptr_t)dbuf[k] + f->skew;
            f->r_alloc = f->host_recv ? malloc(SPAN) : (unsigned char *)(uintptr_t)dbuf[K + k];
            f->r = f->r_alloc + f->skew;
            const size_t span = (size_t)f->n * f->es * f->stride;
            unsigned char *in = f->inplace ? f->r : f->s;
            memset(f->r, POISON, span);
            for (size_t i = 0; i < span; i++)
                if ((i / f->es) % f->stride == 0) in[i] = byte_of(k, i, round);
            if (kind == 1) /* doubles: whole values (any bytes could make a NaN, which MAX may not keep) */
                for (int j = 0; j < f->n; j++) ((double *)(void *)in)[j * f->stride] = (double)((k * 31 + j + round) % 1000);
            f->want = malloc(span);
            for (size_t i = 0; i < span; i++) f->want[i] = (i / f->es) % f->stride == 0 ? in[i] : POISON;
        }
        const int explicit_group = round % 2 == 0;
        if (explicit_group) gbegin();
        for (int k = 0; k < K; k++)
            if (MPI_Iallreduce(o[k].inplace ? MPI_IN_PLACE : o[k].s, o[k].r, o[k].count, o[k].dt, o[k].op, c, &q[k]) != MPI_SUCCESS)
                failures++;
        if (explicit_group) gend();
        if (MPI_Waitall(K, q, MPI_STATUSES_IGNORE) != MPI_SUCCESS) failures++;
        for (int k = 0; k < K; k++) {
            fop_t *f = &o[k];
            const size_t span = (size_t)f->n * f->es * f->stride;
            for (size_t i = 0; i < span; i++) {
                if (f->r[i] == f->want[i]) continue;
                if (failures++ < 10)
                    fprintf(stderr, "fuse_prog: FAIL: round %d (%s) op %d (%d x %s%s%s%s%s): byte %zu is %d, expected %d\n",
                            round, explicit_group ? "explicit group" : "back to back", k, f->n,
                            f->es == 4 ? "int" : f->es == 8 ? "double" : "unsigned char", f->stride > 1 ? ", strided" : "",
                            f->inplace ? ", in place" : "", f->skew ? ", unaligned" : "", f->host_recv ? ", host receive" : "",
                            i, f->r[i], f->want[i]);
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
    /* (one rank: fused only with NCCLMPI_FUSE=all; exact leaves one-rank communicators alone) */
    const char *mode = getenv("NCCLMPI_FUSE");
    const int all = mode && !strcmp(mode, "all");
    if (nccl != (unsigned long long)K * ROUNDS || (all ? fused == 0 || fused >= nccl : fused != 0)) {
        fprintf(stderr, "fuse_prog: FAIL: %llu MPI_Iallreduce on the NCCL route (of %d), %llu fused (NCCLMPI_FUSE=%s)\n", nccl,
                K * ROUNDS, fused, mode ? mode : "exact");
        failures++;
    }
    MPI_Finalize();
    if (failures) return 1;
    printf("fuse_prog: ok (%llu MPI_Iallreduce on the NCCL route, %llu fused)\n", nccl, fused);
    return 0;
}
