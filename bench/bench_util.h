/* Helpers shared by the benchmark programs: checked CUDA (the GPU tests' CUDACHECK) and NCCL
 * calls (abort the job with the failing call and location), a monotonic clock, sizes with K/M/G
 * suffixes, and a comparison for qsort of doubles. Each helper is used only where its library is included. */
#ifndef NM_BENCH_UTIL_H
#define NM_BENCH_UTIL_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test/gpu/gpu_common.h" /* CUDACHECK, shared with the GPU tests */

#define NCCLCHECK(x)                                                                          \
    do {                                                                                      \
        ncclResult_t r_ = (x);                                                                \
        if (r_ != ncclSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                     \
        }                                                                                     \
    } while (0)

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* "64", "4K", "2M", "1G" (powers of 1024) */
static inline size_t bench_parse_size(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (*e == 'K' || *e == 'k') v *= 1024;
    if (*e == 'M' || *e == 'm') v *= 1024 * 1024;
    if (*e == 'G' || *e == 'g') v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

/* The options of a size sweep: -b FIRST -e LAST (sizes), -f FACTOR, -o CSV. 1 when opt is one of
 * them (its value stored), else 0. */
static inline int bench_sweep_opt(const char *opt, const char *val, size_t *b, size_t *e, int *f, const char **out)
{
    if (!strcmp(opt, "-b")) *b = bench_parse_size(val);
    else if (!strcmp(opt, "-e")) *e = bench_parse_size(val);
    else if (!strcmp(opt, "-f")) *f = atoi(val);
    else if (!strcmp(opt, "-o")) *out = val;
    else return 0;
    return 1;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
#endif
