/* classify_cost: what a host-buffer MPI call costs once CUDA is initialised in the process
 * (ncclmpi then asks the driver where each buffer lives). Run it with and without libncclmpi
 * preloaded; the difference of the two ns/call figures is the classification cost.
 *   classify_cost [calls]      (singleton: no mpirun needed)
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"



int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (cudaFree(0) != cudaSuccess) {
        printf("classify_cost: no GPU\n");
        MPI_Finalize();
        return 77;
    }
    void *dev;
    cudaMalloc(&dev, 1 << 20); /* a live device allocation, as in a real application */
    int x = 1, y = 0;
    double t[7];
    for (int rep = 0; rep < 7; rep++) {
        double t0 = bench_now();
        for (long i = 0; i < n; i++) MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_SELF);
        t[rep] = (bench_now() - t0) / n * 1e9;
    }
    qsort(t, 7, sizeof(double), bench_cmp_double);
    double send_ns = t[3];
    for (int rep = 0; rep < 7; rep++) {
        double t0 = bench_now();
        for (long i = 0; i < n / 10; i++) MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
        t[rep] = (bench_now() - t0) / (n / 10) * 1e9;
    }
    qsort(t, 7, sizeof(double), bench_cmp_double);
    printf("classify_cost: host buffers, CUDA initialised: MPI_Send(PROC_NULL) %.1f ns/call, "
           "MPI_Allreduce(1 int, COMM_SELF) %.1f ns/call (median of 7)\n", send_ns, t[3]);
    /* MPI_Allreduce(1 int, COMM_SELF) with both buffers in one place: ncclmpi knows the first
     * three are host memory without asking the driver (NCCLMPI_HOST_RANGES) and asks about the
     * large malloc (mapped memory). (MPI_Send to MPI_PROC_NULL has no buffer to classify.) */
    static int in_static[4];
    int on_stack[4] = {1, 0, 0, 0};
    int *small = malloc(16), *large = malloc(4 << 20);
    small[0] = large[0] = in_static[0] = 1;
    int *const where[] = {on_stack, in_static, small, large};
    const char *const what[] = {"stack", "static", "small malloc", "large malloc"};
    for (int w = 0; w < 4; w++) {
        for (int rep = 0; rep < 7; rep++) {
            double t0 = bench_now();
            for (long i = 0; i < n / 10; i++) MPI_Allreduce(where[w], where[w] + 1, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
            t[rep] = (bench_now() - t0) / (n / 10) * 1e9;
        }
        qsort(t, 7, sizeof(double), bench_cmp_double);
        printf("classify_cost: MPI_Allreduce(1 int, COMM_SELF), buffers in %-12s %.1f ns/call\n", what[w], t[3]);
    }
    free(small);
    free(large);
    /* the floor: one driver pointer query, host and device pointers */
    typedef CUresult (*pga_t)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    pga_t pga = (pga_t)dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuPointerGetAttributes");
    if (pga) {
        CUmemorytype mt;
        int ord;
        unsigned managed;
        CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     CU_POINTER_ATTRIBUTE_IS_MANAGED};
        void *vals[3] = {&mt, &ord, &managed};
        const void *ptrs[2] = {&x, dev};
        for (int w = 0; w < 2; w++)
            for (int na = 1; na <= 3; na += 2) {
                for (int rep = 0; rep < 7; rep++) {
                    double t0 = bench_now();
                    for (long i = 0; i < n; i++) pga(na, at, vals, (CUdeviceptr)ptrs[w]);
                    t[rep] = (bench_now() - t0) / n * 1e9;
                }
                qsort(t, 7, sizeof(double), bench_cmp_double);
                printf("classify_cost: cuPointerGetAttributes(%d attribute%s, %s pointer): %.1f ns\n", na, na > 1 ? "s" : "",
                       w ? "device" : "host", t[3]);
            }
    }
    /* which single attribute answers fastest for a host pointer (the common case) */
    if (pga) {
        struct { CUpointer_attribute a; const char *name; } cand[] = {
            {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE"}, {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT"},
            {CU_POINTER_ATTRIBUTE_IS_MANAGED, "IS_MANAGED"}, {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL"},
            {CU_POINTER_ATTRIBUTE_BUFFER_ID, "BUFFER_ID"}, {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR"}};
        unsigned long long val[2];
        void *vp[1] = {val};
        for (size_t c = 0; c < sizeof(cand) / sizeof(cand[0]); c++) {
            for (int rep = 0; rep < 7; rep++) {
                double t0 = bench_now();
                for (long i = 0; i < n / 4; i++) pga(1, &cand[c].a, vp, (CUdeviceptr)&x);
                t[rep] = (bench_now() - t0) / (n / 4) * 1e9;
            }
            qsort(t, 7, sizeof(double), bench_cmp_double);
            printf("classify_cost: host pointer, attribute %-16s %.1f ns\n", cand[c].name, t[3]);
        }
    }
    cudaFree(dev);
    MPI_Finalize();
    return 0;
}
