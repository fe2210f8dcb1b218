/* coll_bench: collectives on device buffers, three ways in one job:
 *   mpi     MPI_<Coll> on device buffers (intercepted by libncclmpi when preloaded)
 *   nccl    raw NCCL on its own communicator (same GPUs, same sizes)
 *   staged  cudaMemcpy to host, the real MPI (PMPI_<Coll>, never intercepted), copy back
 * Every iteration is blocking (the result is in the receive buffer when it returns), so all
 * three measure the same thing. Prints latency (median), bus bandwidth and the ratio to raw
 * NCCL, and writes CSV.
 *
 *   mpirun -np 4 -x LD_PRELOAD=libncclmpi.so coll_bench [-b 8] [-e 1G] [-f 4] [-o out.csv]
 *          [-c allreduce,bcast,allgather,reduce_scatter,alltoall] [-w staged_max_bytes] [-r 1]
 *   The nccl column needs a GPU per rank (NCCL refuses ranks that share one): left out (-1) otherwise.
 *   -r 1   raw NCCL only (no MPI call on device buffers: runs without libncclmpi, for example as
 *          the control of a compute-sanitizer run)
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { AR, BC, AG, RS, A2A, NCOLL };
static const char *const names[NCOLL] = {"allreduce", "bcast", "allgather", "reduce_scatter", "alltoall"};
static int rank, size;
static ncclComm_t nc;
static cudaStream_t stream;
static float *dsend, *drecv, *hsend, *hrecv;


/* bytes: the "size" of the operation as nccl-tests counts it (allreduce/bcast: buffer;
 * allgather: receive buffer; reduce_scatter: send buffer; alltoall: send buffer) */
static size_t per_rank_elems(int c, size_t bytes)
{
    size_t e = bytes / sizeof(float);
    return (c == AG || c == RS || c == A2A) ? e / size : e;
}

static double busbw_factor(int c)
{
    switch (c) {
    case AR: return 2.0 * (size - 1) / size;
    case BC: return 1.0;
    default: return (double)(size - 1) / size;
    }
}

static void run_mpi(int c, size_t n)
{
    switch (c) {
    case AR: MPI_Allreduce(dsend, drecv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BC: MPI_Bcast(dsend, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case AG: MPI_Allgather(dsend, (int)n, MPI_FLOAT, drecv, (int)n, MPI_FLOAT, MPI_COMM_WORLD); break;
    case RS: MPI_Reduce_scatter_block(dsend, drecv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case A2A: MPI_Alltoall(dsend, (int)n, MPI_FLOAT, drecv, (int)n, MPI_FLOAT, MPI_COMM_WORLD); break;
    }
}

static void run_nccl(int c, size_t n)
{
    switch (c) {
    case AR: NCCLCHECK(ncclAllReduce(dsend, drecv, n, ncclFloat, ncclSum, nc, stream)); break;
    case BC: NCCLCHECK(ncclBroadcast(dsend, dsend, n, ncclFloat, 0, nc, stream)); break;
    case AG: NCCLCHECK(ncclAllGather(dsend, drecv, n, ncclFloat, nc, stream)); break;
    case RS: NCCLCHECK(ncclReduceScatter(dsend, drecv, n, ncclFloat, ncclSum, nc, stream)); break;
    case A2A:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
        NCCLCHECK(ncclAlltoAll(dsend, drecv, n, ncclFloat, nc, stream));
#else
        NCCLCHECK(ncclGroupStart());
        for (int p = 0; p < size; p++) {
            NCCLCHECK(ncclSend(dsend + p * n, n, ncclFloat, p, nc, stream));
            NCCLCHECK(ncclRecv(drecv + p * n, n, ncclFloat, p, nc, stream));
        }
        NCCLCHECK(ncclGroupEnd());
#endif
        break;
    }
    CUDACHECK(cudaStreamSynchronize(stream));
}

static void run_staged(int c, size_t n)
{
    size_t sb = n * sizeof(float), rb = sb;
    if (c == AG) rb = sb * size;
    if (c == RS) sb = rb * size;
    if (c == A2A) sb = rb = sb * size;
    CUDACHECK(cudaMemcpy(hsend, dsend, sb, cudaMemcpyDeviceToHost));
    switch (c) {
    case AR: PMPI_Allreduce(hsend, hrecv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BC: PMPI_Bcast(hsend, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD); rb = 0; break;
    case AG: PMPI_Allgather(hsend, (int)n, MPI_FLOAT, hrecv, (int)n, MPI_FLOAT, MPI_COMM_WORLD); break;
    case RS: PMPI_Reduce_scatter_block(hsend, hrecv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case A2A: PMPI_Alltoall(hsend, (int)n, MPI_FLOAT, hrecv, (int)n, MPI_FLOAT, MPI_COMM_WORLD); break;
    }
    if (c == BC) CUDACHECK(cudaMemcpy(dsend, hsend, sb, cudaMemcpyHostToDevice));
    else CUDACHECK(cudaMemcpy(drecv, hrecv, rb, cudaMemcpyHostToDevice));
}


/* median over `iters` timed iterations (after warm-up); every rank times, rank max is taken */
static double time_it(void (*fn)(int, size_t), int c, size_t n, int iters)
{
    double *t = malloc(iters * sizeof(double));
    for (int i = 0; i < 3; i++) fn(c, n);
    for (int i = 0; i < iters; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        fn(c, n);
        t[i] = bench_now() - t0;
    }
    qsort(t, iters, sizeof(double), bench_cmp_double);
    double med = t[iters / 2], mx;
    free(t);
    PMPI_Allreduce(&med, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t minb = 8, maxb = 1 << 30, staged_max = 256 << 20;
    int factor = 4, raw_only = 0;
    const char *csv = "coll_bench.csv", *colls = "allreduce,bcast,allgather,reduce_scatter,alltoall";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (bench_sweep_opt(argv[i], argv[i + 1], &minb, &maxb, &factor, &csv)) continue;
        if (!strcmp(argv[i], "-c")) colls = argv[i + 1];
        else if (!strcmp(argv[i], "-w")) staged_max = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) raw_only = atoi(argv[i + 1]);
    }
    int ndev, lrank;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(lrank % ndev));
    CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    /* NCCL refuses ranks that share a GPU: then the nccl column is left out (-1) */
    int own_gpu = ndev >= size || size == 1, nccl_ok = 0;
    PMPI_Allreduce(&own_gpu, &nccl_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!nccl_ok && raw_only) {
        if (rank == 0) fprintf(stderr, "coll_bench: -r 1 needs a GPU per rank (NCCL refuses ranks that share one)\n");
        MPI_Finalize();
        return 77;
    }
    if (nccl_ok) {
        ncclUniqueId id;
        if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
        PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCLCHECK(ncclCommInitRank(&nc, size, id, rank));
    }
    size_t cap = maxb + 4096;
    CUDACHECK(cudaMalloc((void **)&dsend, cap));
    CUDACHECK(cudaMalloc((void **)&drecv, cap));
    CUDACHECK(cudaMemset(dsend, 0, cap));
    CUDACHECK(cudaMallocHost((void **)&hsend, staged_max + 4096));
    CUDACHECK(cudaMallocHost((void **)&hrecv, staged_max + 4096));
    FILE *out = rank == 0 ? fopen(csv, "w") : NULL;
    if (out) fprintf(out, "coll,bytes,ranks,mpi_us,nccl_us,staged_us,mpi_busbw_GBs,nccl_busbw_GBs,staged_busbw_GBs,ratio_bw\n");
    if (rank == 0) {
        struct cudaDeviceProp p;
        cudaGetDeviceProperties(&p, lrank % ndev);
        int v;
        ncclGetVersion(&v);
        printf("# coll_bench: %d ranks, %d GPU(s) per node (%s), NCCL %d, float32, median of timed blocking iterations%s\n",
               size, ndev, p.name, v, nccl_ok ? "" : "; nccl column not run (ranks share a GPU)");
        printf("%-15s %10s %11s %11s %11s %9s %9s %9s %8s\n", "coll", "bytes", "mpi_us", "nccl_us", "staged_us", "mpi_GB/s",
               "nccl_GB/s", "stg_GB/s", "bw_ratio");
    }
    for (int c = 0; c < NCOLL; c++) {
        if (!strstr(colls, names[c])) continue;
        for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
            size_t n = per_rank_elems(c, bytes);
            if (n == 0) continue;
            int iters = bytes <= (1 << 20) ? 200 : bytes <= (64 << 20) ? 40 : 10;
            double tn = nccl_ok ? time_it(run_nccl, c, n, iters) : -1e-6;
            double tm = raw_only ? tn : time_it(run_mpi, c, n, iters);
            double ts = !raw_only && bytes <= staged_max ? time_it(run_staged, c, n, iters > 20 ? 20 : iters) : 0;
            double f = busbw_factor(c), gb = 1e9;
            double bm = bytes / tm / gb * f, bn = nccl_ok ? bytes / tn / gb * f : 0, bs = ts > 0 ? bytes / ts / gb * f : 0;
            if (rank == 0) {
                const double ratio = nccl_ok ? bm / bn : -1;
                printf("%-15s %10zu %11.2f %11.2f %11.2f %9.2f %9.2f %9.2f %8.3f\n", names[c], bytes, tm * 1e6, tn * 1e6,
                       ts * 1e6, bm, bn, bs, ratio);
                fprintf(out, "%s,%zu,%d,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f\n", names[c], bytes, size, tm * 1e6, tn * 1e6,
                        ts * 1e6, bm, bn, bs, ratio);
                fflush(stdout);
            }
        }
    }
    if (out) fclose(out);
    if (nccl_ok) ncclCommDestroy(nc);
    cudaFree(dsend);
    cudaFree(drecv);
    cudaFreeHost(hsend);
    cudaFreeHost(hrecv);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
