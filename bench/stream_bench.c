/* stream_bench: stream-ordered allreduces (MPICH's MPIX_Allreduce_enqueue, include/ncclmpi.h)
 * against raw NCCL on the same stream and against blocking MPI_Allreduce, on device buffers, in
 * one job. Per repetition and size, interleaved:
 *   raw       K x ncclAllReduce(in place, float32 sum) on a CUDA stream, then cudaStreamSynchronize
 *   enqueue   K x MPIX_Allreduce_enqueue(MPI_IN_PLACE, ...) on a communicator of that stream, then
 *             cudaStreamSynchronize
 *   blocking  K x MPI_Allreduce(MPI_IN_PLACE, ...) on a duplicate of MPI_COMM_WORLD
 * Printed per call (total / K): medians over repetitions of the slowest rank; "issue" is the host
 * time of the K calls alone (before the synchronisation). Run with libncclmpi preloaded:
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so stream_bench [-b 8] [-e 8M] [-f 16] [-k 16] [-r 100] [-o out.csv]
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "ncclmpi.h"

#define CK CUDACHECK
#define NK NCCLCHECK

static double median_max(double *t, int n)
{
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(t, n, sizeof(double), bench_cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, K = 16, R = 100, f = 16, lrank, ndev;
    size_t b = 8, e = 8 << 20;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (bench_sweep_opt(argv[i], argv[i + 1], &b, &e, &f, &out)) continue;
        if (!strcmp(argv[i], "-k")) K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) R = atoi(argv[i + 1]);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    CK(cudaGetDeviceCount(&ndev));
    CK(cudaSetDevice(lrank % ndev));
    int (*enq)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm) =
        (int (*)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm))dlsym(RTLD_DEFAULT, "MPIX_Allreduce_enqueue");
    int (*mk)(MPI_Info, MPIX_Stream *) = (int (*)(MPI_Info, MPIX_Stream *))dlsym(RTLD_DEFAULT, "MPIX_Stream_create");
    int (*sethex)(MPI_Info, const char *, const void *, int) =
        (int (*)(MPI_Info, const char *, const void *, int))dlsym(RTLD_DEFAULT, "MPIX_Info_set_hex");
    int (*scc)(MPI_Comm, MPIX_Stream, MPI_Comm *) = (int (*)(MPI_Comm, MPIX_Stream, MPI_Comm *))dlsym(RTLD_DEFAULT, "MPIX_Stream_comm_create");
    if (!enq || !mk || !sethex || !scc) {
        if (rank == 0) fprintf(stderr, "stream_bench: run with libncclmpi preloaded\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ncclUniqueId id;
    ncclComm_t nc;
    if (rank == 0) NK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NK(ncclCommInitRank(&nc, size, id, rank));
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "type", "cudaStream_t");
    sethex(info, "value", &s, sizeof(s));
    MPIX_Stream ms;
    MPI_Comm sc, dc;
    if (mk(info, &ms) != MPI_SUCCESS || scc(MPI_COMM_WORLD, ms, &sc) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Info_free(&info);
    MPI_Comm_dup(MPI_COMM_WORLD, &dc);
    float *buf;
    CK(cudaMalloc((void **)&buf, e));
    CK(cudaMemset(buf, 0, e));
    FILE *csv = out && rank == 0 ? fopen(out, "w") : NULL;
    if (csv) fprintf(csv, "bytes,calls,raw_us,enqueue_us,blocking_us,raw_issue_us,enqueue_issue_us,ratio_enqueue_raw\n");
    if (rank == 0)
        printf("# stream_bench: %d ranks, %d calls per repetition, %d repetitions; us per call (median, slowest rank)\n"
               "%10s %10s %10s %10s %10s %10s %8s\n", size, K, R, "bytes", "raw", "enqueue", "blocking", "raw-issue", "enq-issue", "enq/raw");
    double *t = malloc(6 * (size_t)R * sizeof(double));
    for (size_t bytes = b; bytes <= e; bytes *= (size_t)f) {
        const int n = (int)(bytes / sizeof(float)) ? (int)(bytes / sizeof(float)) : 1;
        for (int w = 0; w < 5; w++) {  /* warm-up: every path */
            NK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nc, s));
            enq(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, sc);
            CK(cudaStreamSynchronize(s));
            MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, dc);
        }
        for (int r = 0; r < R; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now();
            for (int k = 0; k < K; k++) NK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nc, s));
            double t1 = bench_now();
            CK(cudaStreamSynchronize(s));
            double t2 = bench_now();
            t[r] = (t2 - t0) / K, t[3 * R + r] = (t1 - t0) / K;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = bench_now();
            for (int k = 0; k < K; k++) enq(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, sc);
            t1 = bench_now();
            CK(cudaStreamSynchronize(s));
            t2 = bench_now();
            t[R + r] = (t2 - t0) / K, t[4 * R + r] = (t1 - t0) / K;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = bench_now();
            for (int k = 0; k < K; k++) MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, dc);
            t[2 * R + r] = (bench_now() - t0) / K;
        }
        double m[5];
        for (int i = 0; i < 5; i++) m[i] = 1e6 * median_max(t + (size_t)i * R, R);
        if (rank == 0) {
            printf("%10zu %10.2f %10.2f %10.2f %10.2f %10.2f %8.3f\n", bytes, m[0], m[1], m[2], m[3], m[4], m[1] / m[0]);
            if (csv) fprintf(csv, "%zu,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f\n", bytes, K, m[0], m[1], m[2], m[3], m[4], m[1] / m[0]);
        }
    }
    if (csv) fclose(csv);
    MPI_Comm_free(&sc);
    MPI_Comm_free(&dc);
    ncclCommDestroy(nc);
    MPI_Finalize();
    return 0;
}
