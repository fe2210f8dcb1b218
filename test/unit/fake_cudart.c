/* A stand-in for the few CUDA runtime calls the GPU test programs make (test/gpu/gpu_common.h,
 * gpu_hazard.c), on top of the stand-in driver (fake_cuda.c, preloaded: its entry points are found
 * in the process), so that test/gpu/gpu_hazard.c runs on a machine without a GPU as
 * test/unit/hazard_stand_in (test/unit/hazard.sh): each rank with a "device" of its own
 * (FAKE_CUDA_DEVICE_PER_RANK=1), ncclmpi's NCCL route through the stand-in NCCL's several-rank
 * mode. Managed memory is plain stand-in device memory here; stream memory operations (the
 * driver entry point gpu_hazard asks for) are not offered. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

/* the stand-in driver's entry point `name` (cuda.h's exported name), or abort */
static void *drv(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f) {
        fprintf(stderr, "stand-in CUDA runtime: the stand-in driver (preloaded) has no %s\n", name);
        abort();
    }
    return f;
}
#define DRV(ret, name, args) static ret(*p_##name) args; if (!p_##name) p_##name = (ret(*) args)drv(#name)
static cudaError_t err(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown; }

static CUresult ctx_on(int d)
{
    DRV(CUresult, cuInit, (unsigned));
    DRV(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice));
    DRV(CUresult, cuCtxSetCurrent, (CUcontext));
    CUcontext c;
    CUresult r = p_cuInit(0);
    if (r == CUDA_SUCCESS) r = p_cuDevicePrimaryCtxRetain(&c, d);
    return r == CUDA_SUCCESS ? p_cuCtxSetCurrent(c) : r;
}
static int cur_dev;
static void ensure_ctx(void)
{
    static int done;
    if (!done) done = ctx_on(cur_dev) == CUDA_SUCCESS;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    DRV(CUresult, cuInit, (unsigned));
    DRV(CUresult, cuDeviceGetCount, (int *));
    CUresult r = p_cuInit(0);
    return err(r == CUDA_SUCCESS ? p_cuDeviceGetCount(n) : r);
}
EXPORT cudaError_t cudaSetDevice(int d)
{
    cur_dev = d;
    return err(ctx_on(d));
}
/* the context's resources go (the stand-in driver's model of a reset); the next call makes it again */
EXPORT cudaError_t cudaDeviceReset(void)
{
    DRV(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice));
    ensure_ctx();
    return err(p_cuDevicePrimaryCtxReset_v2(cur_dev));
}
EXPORT cudaError_t cudaGetDevice(int *d)
{
    *d = cur_dev;
    return cudaSuccess;
}
EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    DRV(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t));
    ensure_ctx();
    CUdeviceptr d = 0;
    cudaError_t e = err(p_cuMemAlloc_v2(&d, n));
    *p = (void *)(uintptr_t)d;
    return e;
}
EXPORT cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags)
{
    (void)flags;
    return cudaMalloc(p, n);
}
EXPORT cudaError_t cudaFree(void *p)
{
    DRV(CUresult, cuMemFree_v2, (CUdeviceptr));
    ensure_ctx();
    return p ? err(p_cuMemFree_v2((CUdeviceptr)(uintptr_t)p)) : cudaSuccess;
}
EXPORT cudaError_t cudaMallocHost(void **p, size_t n)
{
    DRV(CUresult, cuMemAllocHost_v2, (void **, size_t));
    ensure_ctx();
    return err(p_cuMemAllocHost_v2(p, n));
}
EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    DRV(CUresult, cuMemHostAlloc, (void **, size_t, unsigned));
    ensure_ctx();
    return err(p_cuMemHostAlloc(p, n, flags));
}
EXPORT cudaError_t cudaFreeHost(void *p)
{
    DRV(CUresult, cuMemFreeHost, (void *));
    return err(p_cuMemFreeHost(p));
}
EXPORT cudaError_t cudaHostGetDevicePointer(void **d, void *p, unsigned flags)
{
    DRV(CUresult, cuMemHostGetDevicePointer_v2, (CUdeviceptr *, void *, unsigned));
    CUdeviceptr x = 0;
    cudaError_t e = err(p_cuMemHostGetDevicePointer_v2(&x, p, flags));
    *d = (void *)(uintptr_t)x;
    return e;
}
EXPORT cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)
{
    (void)k;
    DRV(CUresult, cuMemcpy, (CUdeviceptr, CUdeviceptr, size_t));
    ensure_ctx();
    return err(p_cuMemcpy((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)s, n));
}
EXPORT cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    (void)k;
    DRV(CUresult, cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream));
    ensure_ctx();
    return err(p_cuMemcpyAsync((CUdeviceptr)(uintptr_t)d, (CUdeviceptr)(uintptr_t)s, n, (CUstream)st));
}
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    DRV(CUresult, cuStreamCreate, (CUstream *, unsigned));
    ensure_ctx();
    CUstream x = NULL;
    cudaError_t e = err(p_cuStreamCreate(&x, flags));
    *s = (cudaStream_t)x;
    return e;
}
EXPORT cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
    DRV(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream));
    ensure_ctx();
    return err(p_cuMemsetD8Async((CUdeviceptr)(uintptr_t)d, (unsigned char)v, n, (CUstream)st));
}
EXPORT cudaError_t cudaMemset(void *d, int v, size_t n)
{
    cudaError_t e = cudaMemsetAsync(d, v, n, (cudaStream_t)CU_STREAM_LEGACY);
    return e == cudaSuccess ? cudaStreamSynchronize((cudaStream_t)CU_STREAM_LEGACY) : e;
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    DRV(CUresult, cuStreamDestroy_v2, (CUstream));  // (cuda.h's name for it)
    return err(p_cuStreamDestroy_v2((CUstream)s));
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    DRV(CUresult, cuStreamSynchronize, (CUstream));
    return err(p_cuStreamSynchronize((CUstream)s));
}
EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    DRV(CUresult, cuStreamSynchronize, (CUstream));
    return err(p_cuStreamSynchronize(CU_STREAM_LEGACY));
}
EXPORT const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stand-in CUDA runtime error"; }
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned ver, unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *q)
{
    (void)sym; (void)ver; (void)flags;
    *fn = NULL;
    if (q) *q = cudaDriverEntryPointSymbolNotFound;
    return cudaErrorUnknown;
}
