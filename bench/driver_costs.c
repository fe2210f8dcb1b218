/* driver_costs: the host time of the CUDA driver calls a point-to-point envelope makes, on one
 * process (GPU 0, and GPU 1 as a peer when there is one); medians of 400 repetitions.
 *   6 x (128 KiB device copy + stream synchronisation) against 6 x (copy + event) + one wait;
 *   cuEventQuery of a completed event; cuEventRecord; one copy with and without its wait;
 *   six 128 KiB copies from the peer as one cuMemcpyBatchAsync against six cuMemcpyAsync.
 * Driver API only (links libcuda); run it on a GPU machine: bench/driver_costs */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                      \
    do {                                                           \
        CUresult r_ = (x);                                         \
        if (r_ != CUDA_SUCCESS) {                                  \
            const char *s_ = "?";                                  \
            cuGetErrorName(r_, &s_);                               \
            fprintf(stderr, "driver_costs: %s: %s\n", #x, s_);     \
            exit(1);                                               \
        }                                                          \
    } while (0)

enum { REP = 400, M = 6 };
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v)
{
    qsort(v, REP, sizeof(double), cmp);
    return v[REP / 2];
}

int main(void)
{
    const size_t B = 128 << 10;
    CUdevice d0, d1;
    CUcontext c0, c1 = NULL;
    int n = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&n));
    CK(cuDeviceGet(&d0, 0));
    CK(cuDevicePrimaryCtxRetain(&c0, d0));
    CK(cuCtxSetCurrent(c0));
    CUdeviceptr src, dst, peer = 0;
    CK(cuMemAlloc(&src, B * M));
    CK(cuMemAlloc(&dst, B * M));
    if (n > 1) {
        CK(cuDeviceGet(&d1, 1));
        CK(cuDevicePrimaryCtxRetain(&c1, d1));
        CK(cuCtxSetCurrent(c1));
        CK(cuMemAlloc(&peer, B * M));
        CK(cuCtxSetCurrent(c0));
        cuCtxEnablePeerAccess(c1, 0);  /* (already enabled: fine) */
    }
    CUstream s;
    CUevent ev[M];
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < M; i++) CK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
    static double a[REP], b[REP], q[REP], r[REP];
    for (int warm = 0; warm < 2; warm++)
        for (int k = 0; k < REP; k++) {
            double t0 = now_us();
            for (int i = 0; i < M; i++) {
                CK(cuMemcpyAsync(dst + i * B, src + i * B, B, CU_STREAM_LEGACY));
                CK(cuStreamSynchronize(CU_STREAM_LEGACY));
            }
            a[k] = now_us() - t0;
            t0 = now_us();
            for (int i = 0; i < M; i++) {
                CK(cuMemcpyAsync(dst + i * B, src + i * B, B, CU_STREAM_LEGACY));
                CK(cuEventRecord(ev[i], CU_STREAM_LEGACY));
            }
            for (int i = 0; i < M; i++) CK(cuEventSynchronize(ev[i]));
            b[k] = now_us() - t0;
            t0 = now_us();
            for (int i = 0; i < M; i++) cuEventQuery(ev[i]);
            q[k] = (now_us() - t0) / M;
            t0 = now_us();
            CK(cuEventRecord(ev[0], CU_STREAM_LEGACY));
            r[k] = now_us() - t0;
        }
    printf("6 x (copy 128 KiB + sync) %.2f us; 6 x (copy + event) + wait %.2f us; cuEventQuery (done) %.3f us; "
           "cuEventRecord %.3f us\n", median(a), median(b), median(q), median(r));
    for (int k = 0; k < REP; k++) {
        double t0 = now_us();
        CK(cuMemcpyAsync(dst, src, B, CU_STREAM_LEGACY));
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(CU_STREAM_LEGACY));
        b[k] = now_us() - t0;
    }
    printf("one copy of 128 KiB: call %.2f us, call + sync %.2f us\n", median(a), median(b));
    CUdeviceptr ds[M], ss[M];
    size_t sz[M], idx = 0;
    for (int i = 0; i < M; i++) {
        ds[i] = dst + i * B;
        ss[i] = (peer ? peer : src) + i * B;
        sz[i] = B;
    }
    const char *from = peer ? "from the peer" : "local";
#if CUDA_VERSION >= 13000
    CUmemcpyAttributes at = {0};
    at.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    int batch_ok = 1;
    for (int k = 0; k < REP && batch_ok; k++) {
        double t0 = now_us();
        batch_ok = cuMemcpyBatchAsync(ds, ss, sz, M, &at, &idx, 1, s) == CUDA_SUCCESS;
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(s));
        b[k] = now_us() - t0;
    }
    if (batch_ok) printf("batch of 6 x 128 KiB (%s): call %.2f us, call + sync %.2f us\n", from, median(a), median(b));
#endif
    for (int k = 0; k < REP; k++) {
        double t0 = now_us();
        for (int i = 0; i < M; i++) CK(cuMemcpyAsync(ds[i], ss[i], B, s));
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(s));
        b[k] = now_us() - t0;
    }
    printf("6 x cuMemcpyAsync 128 KiB (%s): calls %.2f us, calls + sync %.2f us\n", from, median(a), median(b));
    (void)idx;
    return 0;
}
