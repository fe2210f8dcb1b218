/* The stand-in CUDA driver (test/unit/fake_cuda.c) from a test program: already loaded (preloaded,
 * named by NCCLMPI_CUDA_LIB), initialised here with its context current, and n buffers of `bytes`
 * allocated in its device memory. Returns the driver's handle (for its counters), or NULL with a
 * message when it is not usable. */
#ifndef NM_TEST_STAND_IN_H
#define NM_TEST_STAND_IN_H
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline void *stand_in_driver(const char *prog, int n, size_t bytes, CUdeviceptr *bufs)
{
    const char *lib = getenv("NCCLMPI_CUDA_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    CUresult (*init)(unsigned) = h ? (CUresult(*)(unsigned))dlsym(h, "cuInit") : NULL;
    CUresult (*retain)(CUcontext *, CUdevice) = h ? (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain") : NULL;
    CUresult (*setcur)(CUcontext) = h ? (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent") : NULL;
    CUresult (*alloc)(CUdeviceptr *, size_t) = h ? (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2") : NULL;
    CUcontext ctx;
    int ok = init && retain && setcur && alloc && !init(0) && !retain(&ctx, 0) && !setcur(ctx);
    for (int i = 0; ok && i < n; i++) ok = !alloc(&bufs[i], bytes);
    if (!ok) {
        fprintf(stderr, "%s: the stand-in driver (NCCLMPI_CUDA_LIB, preloaded) is not usable\n", prog);
        return NULL;
    }
    return h;
}

/* MPI_Init of a stand-in program: at MPI_THREAD_MULTIPLE where the environment variable
 * threads_env is set (the program then runs two threads at once, stand_in_threads), with rank and
 * size. Returns the number of threads to run: 2 or 1. */
static inline int stand_in_mpi_init(int *argc, char ***argv, const char *threads_env, int *rank, int *size)
{
    const int threads = getenv(threads_env) ? 2 : 1;
    int provided = 0;
    MPI_Init_thread(argc, argv, threads > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return threads;
}

/* fn(arg[i]) for i < n: on this thread when n is 1, else on n threads at once (joined) */
static inline void stand_in_threads(void *(*fn)(void *), void *args, size_t arg_size, int n)
{
    pthread_t tid[8];
    if (n == 1) {
        fn(args);
        return;
    }
    for (int i = 0; i < n && i < 8; i++) pthread_create(&tid[i], NULL, fn, (char *)args + i * arg_size);
    for (int i = 0; i < n && i < 8; i++) pthread_join(tid[i], NULL);
}

/* The buffers stand_in_driver allocated as a pool for dev_new/dev_free: a free one (of `bufsz`
 * bytes, at least n) taken, or NULL; given back by address. */
static inline void *stand_in_take(CUdeviceptr *bufs, int *used, int nbuf, size_t bufsz, size_t n)
{
    for (int i = 0; i < nbuf && n <= bufsz; i++)
        if (!used[i]) return used[i] = 1, (void *)(uintptr_t)bufs[i];
    return NULL;
}
static inline void stand_in_give(const CUdeviceptr *bufs, int *used, int nbuf, const void *p)
{
    for (int i = 0; i < nbuf; i++)
        if ((const void *)(uintptr_t)bufs[i] == p) used[i] = 0;
}
#endif
