/* driver_costs: the host time of the CUDA driver calls a point-to-point envelope makes, on one
 * process (GPU 0, and GPU 1 as a peer when there is one); medians of 400 repetitions.
 *   6 x (128 KiB device copy + stream synchronisation) against 6 x (copy + event) + one wait;
 *   cuEventQuery of a completed event; cuEventRecord; one copy with and without its wait, on the
 *   legacy stream and on a non-blocking one ordered after it by an event;
 *   six 128 KiB copies from the peer as one cuMemcpyBatchAsync against six cuMemcpyAsync;
 *   the same six copies (local, and from the peer) by one launch of a copy kernel that gets
 *   its (dst, src, bytes) list in its parameters.
 * Driver API only (links libcuda); run it on a GPU machine: bench/driver_costs [KiB per copy, 128] */
#include <time.h>

#define CK_PROG "driver_costs"
#include "cu_check.h"

enum { REP = 400, M = 6 };

/* nm_copyv: block (x, y) copies 16-byte words of descriptor y = {dst, src, bytes (a multiple of
 * 16)}, grid-stride over x; the descriptors travel in the kernel's parameters (M of them);
 * JIT-compiled by the driver */
static const char copy_ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry nm_copyv(.param .align 8 .b8 desc[144]) {\n"
    "  .reg .b64 %rd<14>;\n  .reg .b32 %r<8>;\n  .reg .b32 %v<4>;\n  .reg .pred %p<2>;\n"
    "  mov.u64 %rd1, desc;\n  mov.u32 %r1, %ctaid.y;\n  mul.wide.u32 %rd2, %r1, 24;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n  ld.param.u64 %rd4, [%rd3];\n  ld.param.u64 %rd5, [%rd3+8];\n"
    "  ld.param.u64 %rd6, [%rd3+16];\n"
    "  shr.u64 %rd7, %rd6, 4;\n  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
    "  mov.u32 %r5, %nctaid.x;\n  mad.lo.u32 %r6, %r2, %r3, %r4;\n  mul.lo.u32 %r7, %r5, %r3;\n"
    "  cvt.u64.u32 %rd8, %r6;\n  cvt.u64.u32 %rd9, %r7;\n"
    "LOOP:\n  setp.ge.u64 %p1, %rd8, %rd7;\n  @%p1 bra END;\n  shl.b64 %rd10, %rd8, 4;\n"
    "  add.u64 %rd11, %rd5, %rd10;\n  add.u64 %rd12, %rd4, %rd10;\n"
    "  ld.global.v4.u32 {%v0, %v1, %v2, %v3}, [%rd11];\n  st.global.v4.u32 [%rd12], {%v0, %v1, %v2, %v3};\n"
    "  add.u64 %rd8, %rd8, %rd9;\n  bra LOOP;\n"
    "END:\n  ret;\n}\n";
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

int main(int argc, char **argv)
{
    const size_t kib = argc > 1 ? (size_t)atol(argv[1]) : 128, B = (kib ? kib : 128) << 10;
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
    printf("6 x (copy %zu KiB + sync) %.2f us; 6 x (copy + event) + wait %.2f us; cuEventQuery (done) %.3f us; "
           "cuEventRecord %.3f us\n", B >> 10, median(a), median(b), median(q), median(r));
    for (int k = 0; k < REP; k++) {
        double t0 = now_us();
        CK(cuMemcpyAsync(dst, src, B, CU_STREAM_LEGACY));
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(CU_STREAM_LEGACY));
        b[k] = now_us() - t0;
    }
    printf("one copy of %zu KiB: call %.2f us, call + sync %.2f us\n", B >> 10, median(a), median(b));
    /* the same copy on a non-blocking stream, ordered after the legacy stream's work by an event
     * (how the staged path copies): the three calls, and with the wait */
    for (int k = 0; k < REP; k++) {
        double t0 = now_us();
        CK(cuEventRecord(ev[0], CU_STREAM_LEGACY));
        CK(cuStreamWaitEvent(s, ev[0], 0));
        CK(cuMemcpyAsync(dst, src, B, s));
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(s));
        b[k] = now_us() - t0;
    }
    printf("one copy of %zu KiB on a non-blocking stream after an event on the legacy one: calls %.2f us, "
           "calls + sync %.2f us\n", B >> 10, median(a), median(b));
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
    if (batch_ok) printf("batch of 6 x %zu KiB (%s): call %.2f us, call + sync %.2f us\n", B >> 10, from, median(a), median(b));
#endif
    for (int k = 0; k < REP; k++) {
        double t0 = now_us();
        for (int i = 0; i < M; i++) CK(cuMemcpyAsync(ds[i], ss[i], B, s));
        a[k] = now_us() - t0;
        CK(cuStreamSynchronize(s));
        b[k] = now_us() - t0;
    }
    printf("6 x cuMemcpyAsync %zu KiB (%s): calls %.2f us, calls + sync %.2f us\n", B >> 10, from, median(a), median(b));
    /* one copy kernel for all six, its list passed in the kernel's parameters */
    CUmodule mod;
    CUfunction fcopy;
    unsigned long long desc[3 * M];
    if (cuModuleLoadData(&mod, copy_ptx) == CUDA_SUCCESS && cuModuleGetFunction(&fcopy, mod, "nm_copyv") == CUDA_SUCCESS) {
        for (int pass = 0; pass < (peer ? 2 : 1); pass++) {
            for (int k = 0; k < REP; k++) {
                double t0 = now_us();
                for (int i = 0; i < M; i++) {
                    desc[3 * i] = ds[i];
                    desc[3 * i + 1] = (pass ? peer : src) + i * B;
                    desc[3 * i + 2] = B;
                }
                void *args[] = {desc};
                CK(cuLaunchKernel(fcopy, 16, M, 1, 256, 1, 1, 0, CU_STREAM_LEGACY, args, NULL));
                a[k] = now_us() - t0;
                CK(cuStreamSynchronize(CU_STREAM_LEGACY));
                b[k] = now_us() - t0;
            }
            /* the copies are checked once: the last pass's data must be what the source holds */
            printf("copy kernel, 6 x %zu KiB in one launch (%s): call %.2f us, call + sync %.2f us\n", B >> 10,
                   pass ? "from the peer" : "local", median(a), median(b));
        }
        unsigned char *h1 = malloc(B), *h2 = malloc(B);
        CK(cuMemsetD8(src + (M - 1) * B, 0x5a, B));
        CK(cuMemsetD8(ds[M - 1], 0, B));
        for (int i = 0; i < M; i++) {
            desc[3 * i] = ds[i];
            desc[3 * i + 1] = src + i * B;
            desc[3 * i + 2] = B;
        }
        void *args[] = {desc};
        CK(cuLaunchKernel(fcopy, 16, M, 1, 256, 1, 1, 0, CU_STREAM_LEGACY, args, NULL));
        CK(cuStreamSynchronize(CU_STREAM_LEGACY));
        CK(cuMemcpyDtoH(h1, src + (M - 1) * B, B));
        CK(cuMemcpyDtoH(h2, ds[M - 1], B));
        int same = 1;
        for (size_t i = 0; i < B; i++) same &= h1[i] == h2[i];
        printf("copy kernel check: %s\n", same ? "the copy matches its source" : "FAIL: the copy differs from its source");
        free(h1);
        free(h2);
    } else {
        printf("copy kernel: not measured (module load failed)\n");
    }
    (void)idx;
    return 0;
}
