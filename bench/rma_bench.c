/* rma_bench: one-sided communication on device data, three ways in one job; each rank puts n
 * bytes into its ring neighbour's window, then MPI_Win_fence:
 *   mpi      the window and the origin buffer are device memory (MPI_Win_create over cudaMalloc;
 *            ncclmpi, preloaded, copies through CUDA IPC)
 *   manual   what a program does without a CUDA-aware MPI: a host window, cudaMemcpy of the
 *            origin to host memory before the MPI_Put, cudaMemcpy of the window into device
 *            memory after the fence (the target's data is device memory)
 *   host     the same MPI_Put and fence on host memory, no copy (the MPI's own time)
 * and the latency of an 8-byte MPI_Fetch_and_op (MPI_SUM) on rank 0's window, inside
 * MPI_Win_lock_all, with MPI_Win_flush: on a window in device memory (mpi) and in host memory
 * (host). Every put is checked (the window read back after the last iteration of each size).
 * Medians over the iterations of the slowest rank's time.
 *
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so rma_bench [-b 8] [-e 64M] [-f 8] [-n 20] [-o out.csv]
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { W_MPI, W_MANUAL, W_HOST, NWAY };
static const char *const way_names[NWAY] = {"mpi", "manual", "host"};
static int rank, size, next;

static double slowest(double t)
{
    double m = 0;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), bench_cmp_double);
    return t[n / 2];
}

/* one put and fence, `way`; win over dwin (mpi) or hwin (manual, host) */
static double put_once(int way, MPI_Win win, const char *dsrc, const char *hsrc, char *hstage, char *ddata,
                       const char *hwin, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    const int count = (int)n;
    if (way == W_MANUAL) CUDACHECK(cudaMemcpy(hstage, dsrc, n, cudaMemcpyDeviceToHost));
    MPI_Put(way == W_MPI ? dsrc : way == W_MANUAL ? hstage : hsrc, count, MPI_BYTE, next, 0, count, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    if (way == W_MANUAL) CUDACHECK(cudaMemcpy(ddata, hwin, n, cudaMemcpyHostToDevice));
    return slowest(bench_now() - t0);
}

static double fetch_once(MPI_Win win, long long *one, long long *got)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    MPI_Fetch_and_op(one, got, MPI_LONG_LONG, 0, 0, MPI_SUM, win);
    MPI_Win_flush(0, win);
    return slowest(bench_now() - t0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    next = (rank + 1) % size;
    size_t b = 8, e = (size_t)64 << 20;
    int f = 8, iters = 20;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (bench_sweep_opt(argv[i], argv[i + 1], &b, &e, &f, &out)) continue;
        if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    }
    if (e > ((size_t)1 << 31) - 1) e = ((size_t)1 << 31) - 1; /* (an int count of bytes) */
    if (iters < 1) iters = 1;
    int ndev = 0;
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(rank % ndev));
    char *dwin, *dsrc, *ddata, *hwin = malloc(e), *hsrc = malloc(e), *hstage = malloc(e), *want = malloc(e), *check = malloc(e);
    CUDACHECK(cudaMalloc((void **)&dwin, e));
    CUDACHECK(cudaMalloc((void **)&dsrc, e));
    CUDACHECK(cudaMalloc((void **)&ddata, e));
    const int prev = (rank + size - 1) % size;
    for (size_t i = 0; i < e; i++) {
        hsrc[i] = (char)(i * 131 + rank * 7 + (i >> 12));
        want[i] = (char)(i * 131 + prev * 7 + (i >> 12)); /* what the previous rank puts here */
    }
    CUDACHECK(cudaMemcpy(dsrc, hsrc, e, cudaMemcpyHostToDevice));
    MPI_Win win[NWAY];
    MPI_Win_create(dwin, (MPI_Aint)e, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win[W_MPI]);
    MPI_Win_create(hwin, (MPI_Aint)e, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win[W_MANUAL]);
    win[W_HOST] = win[W_MANUAL];
    for (int w = 0; w < NWAY; w++) MPI_Win_fence(0, win[w]);
    FILE *csv = rank == 0 && out ? fopen(out, "w") : NULL;
    if (csv) fprintf(csv, "case,bytes,way,median_us\n");
    if (rank == 0)
        printf("# rma_bench: %d ranks, put into the next rank's window + fence; median of %d, slowest rank\n"
               "%12s %12s %12s %12s %9s\n", size, iters, "bytes", "mpi(us)", "manual(us)", "host(us)", "man/mpi");
    int bad = 0;
    double *ts = malloc(sizeof(double) * (size_t)iters);
    for (size_t n = b; n <= e; n *= (size_t)f) {
        double med[NWAY];
        for (int w = 0; w < NWAY; w++) {
            put_once(w, win[w], dsrc, hsrc, hstage, ddata, hwin, n); /* (warm-up) */
            for (int it = 0; it < iters; it++) ts[it] = put_once(w, win[w], dsrc, hsrc, hstage, ddata, hwin, n);
            med[w] = median(ts, iters);
            /* the window (mpi) or the device copy of it (manual) holds the previous rank's bytes */
            if (w != W_HOST) {
                CUDACHECK(cudaMemcpy(check, w == W_MPI ? dwin : ddata, n, cudaMemcpyDeviceToHost));
                if (memcmp(check, want, n)) bad++;
                CUDACHECK(cudaMemset(w == W_MPI ? dwin : ddata, 0, n));
                if (w == W_MANUAL) memset(hwin, 0, n); /* (the host way must put its own bytes) */
            } else if (memcmp(hwin, want, n)) {
                bad++;
            }
            MPI_Win_fence(0, win[w]);
            if (csv) fprintf(csv, "put+fence,%zu,%s,%.3f\n", n, way_names[w], med[w] * 1e6);
        }
        if (rank == 0)
            printf("%12zu %12.2f %12.2f %12.2f %9.2f\n", n, med[W_MPI] * 1e6, med[W_MANUAL] * 1e6, med[W_HOST] * 1e6,
                   med[W_MANUAL] / med[W_MPI]);
        if (n > e / (size_t)f) break;
    }
    /* 8-byte fetch-and-add on rank 0, device window vs host window */
    long long one = 1, got = 0, *hone = malloc(sizeof(long long)), *hgot = malloc(sizeof(long long));
    *hone = 1;
    long long *done, *dgot;
    CUDACHECK(cudaMalloc((void **)&done, sizeof(long long)));
    CUDACHECK(cudaMalloc((void **)&dgot, sizeof(long long)));
    CUDACHECK(cudaMemcpy(done, &one, sizeof(one), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(dwin, 0, 8));
    memset(hwin, 0, 8);
    MPI_Barrier(MPI_COMM_WORLD);
    double fm[2];
    for (int w = 0; w < 2; w++) {
        MPI_Win_lock_all(0, win[w]);
        for (int it = 0; it < iters; it++)
            ts[it] = fetch_once(win[w], w == 0 ? done : hone, w == 0 ? dgot : hgot);
        MPI_Win_unlock_all(win[w]);
        fm[w] = median(ts, iters);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) { /* every rank added 1 iters times */
            long long total = 0;
            if (w == 0) CUDACHECK(cudaMemcpy(&total, dwin, 8, cudaMemcpyDeviceToHost));
            else memcpy(&total, hwin, 8);
            if (total != (long long)iters * size) bad++;
        }
        if (csv) fprintf(csv, "fetch_and_op 8B,8,%s,%.3f\n", w == 0 ? "mpi" : "host", fm[w] * 1e6);
    }
    (void)got;
    if (rank == 0) printf("# 8-byte MPI_Fetch_and_op + flush: device window %.2f us, host window %.2f us\n", fm[0] * 1e6, fm[1] * 1e6);
    int allbad = 0;
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(allbad ? "# rma_bench: %d WRONG results\n" : "# rma_bench: results checked%.0d\n", allbad);
    if (csv) fclose(csv);
    MPI_Win_free(&win[W_MPI]);
    MPI_Win_free(&win[W_MANUAL]);
    MPI_Finalize();
    return allbad ? 1 : 0;
}
