/* The stand-in CUDA driver (test/unit/fake_cuda.c) from a test program: already loaded (preloaded,
 * named by NCCLMPI_CUDA_LIB), initialised here with its context current, and n buffers of `bytes`
 * allocated in its device memory. Returns the driver's handle (for its counters), or NULL with a
 * message when it is not usable. */
#ifndef NM_TEST_STAND_IN_H
#define NM_TEST_STAND_IN_H
#include <cuda.h>
#include <dlfcn.h>
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
