/* Shared helpers of the GPU tests: device selection, checks, ncclmpi stats lookup. The tests
 * are plain CUDA-aware MPI programs: they know nothing of ncclmpi except, optionally, its
 * stats (looked up with dlsym, so the same binary runs without the library). */
#ifndef NM_TEST_GPU_COMMON_H
#define NM_TEST_GPU_COMMON_H
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclmpi.h"

#define CUDACHECK(x)                                                                          \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                     \
        }                                                                                     \
    } while (0)

/* A failed check: one line with the rank and the place, counted in `failures` (the test defines
 * `rank` and `failures`). */
#define GPU_CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", rank, __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fprintf(stderr, "\n");                                                            \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

/* ncclmpi's counters of one function (the public header's types; the functions are looked up with
 * dlsym, so the tests run without the library too) */
typedef struct {
    unsigned long long calls, fortran_calls, route[NCCLMPI_ROUTE_COUNT];
    unsigned long long oneshot; /* NCCLMPI_ROUTE_ONESHOT, outside ncclmpi_stats_t */
    unsigned long long ipc;     /* NCCLMPI_ROUTE_IPC: likewise */
} nm_stats_view_t;

/* route counters of one function, or -1 in calls when ncclmpi is not loaded */
static inline nm_stats_view_t gpu_stats(const char *fn)
{
    nm_stats_view_t v;
    ncclmpi_stats_t s;
    memset(&v, 0, sizeof(v));
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!get || get(fn, &s) != 0) {
        v.calls = (unsigned long long)-1;
        return v;
    }
    v.calls = s.calls;
    v.fortran_calls = s.fortran_calls;
    memcpy(v.route, s.route, sizeof(v.route));
    if (route) route(fn, NCCLMPI_ROUTE_ONESHOT, &v.oneshot);
    if (route) route(fn, NCCLMPI_ROUTE_IPC, &v.ipc);
    return v;
}

/* Picks device local_rank % ndev; returns 1 when every rank of the node has its own GPU. */
static inline int gpu_select(int *ndev_out)
{
    int ndev = 0, lrank = 0, lsize = 1;
    CUDACHECK(cudaGetDeviceCount(&ndev));
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);
    CUDACHECK(cudaSetDevice(lrank % ndev));
    CUDACHECK(cudaFree(0));
    if (ndev_out) *ndev_out = ndev;
    /* ranks on one GPU are distinct for NCCL (and ncclmpi) when their NCCL_HOSTID differ: NCCL
     * then connects them through its network transport (tools/gpu_check.sh virtual) */
    const char *h = getenv("NCCL_HOSTID");
    unsigned long long mine[2] = {(unsigned long long)(lrank % ndev), 0}, *all;
    for (; h && *h; h++) mine[1] = (mine[1] ^ (unsigned char)*h) * 1099511628211ull;
    if (h) mine[1] |= 1;
    all = (unsigned long long *)malloc(sizeof(mine) * (size_t)lsize);
    MPI_Allgather(mine, 2, MPI_UNSIGNED_LONG_LONG, all, 2, MPI_UNSIGNED_LONG_LONG, node);
    MPI_Comm_free(&node);
    int distinct = 1;
    for (int i = 0; i < lsize; i++)
        for (int j = 0; j < i; j++)
            if (all[2 * i] == all[2 * j] && all[2 * i + 1] == all[2 * j + 1]) distinct = 0;
    free(all);
    return distinct;
}
/* memory of every kind, read and written through one path */
enum { MK_DEV, MK_MALLOC, MK_PINNED, MK_MANAGED };
static const char *const mk_name[] __attribute__((unused)) = {"cudaMalloc", "malloc", "cudaMallocHost", "cudaMallocManaged"};

static inline void *mk_alloc(int kind, size_t n)
{
    void *p = NULL;
    if (n == 0) n = 1;
    switch (kind) {
        case MK_DEV:
            CUDACHECK(cudaMalloc(&p, n));
            break;
        case MK_PINNED:
            CUDACHECK(cudaMallocHost(&p, n));
            break;
        case MK_MANAGED:
            CUDACHECK(cudaMallocManaged(&p, n, cudaMemAttachGlobal));
            break;
        default:
            p = malloc(n);
            if (!p) {
                fprintf(stderr, "out of memory (%zu bytes)\n", n);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
    }
    return p;
}

static inline void mk_free(int kind, void *p)
{
    if (!p) return;
    switch (kind) {
        case MK_DEV:
        case MK_MANAGED:
            CUDACHECK(cudaFree(p));
            break;
        case MK_PINNED:
            CUDACHECK(cudaFreeHost(p));
            break;
        default:
            free(p);
    }
}

static inline void put_bytes(int kind, void *dst, const void *src, size_t n)
{
    if (kind == MK_MALLOC)
        memcpy(dst, src, n);
    else
        CUDACHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}

static inline void get_bytes(int kind, void *dst, const void *src, size_t n)
{
    if (kind == MK_MALLOC)
        memcpy(dst, src, n);
    else
        CUDACHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
}

/* the same through a stream that does not wait for the legacy default stream: a blocking MPI call
 * must have finished writing its receive buffer when it returned, not only queued the writes
 * there (a cudaMemcpy would wait for them) */
static inline void get_bytes_unordered(int kind, void *dst, const void *src, size_t n)
{
    static cudaStream_t s;
    if (kind == MK_MALLOC) {
        memcpy(dst, src, n);
        return;
    }
    if (!s) CUDACHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDACHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
    CUDACHECK(cudaStreamSynchronize(s));
}
#endif
