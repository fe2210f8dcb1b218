/* io_bench: MPI-IO of device buffers, three ways in one job, each rank its own block of one file:
 *   mpi      MPI_File_write_at_all / MPI_File_read_at_all on the device buffer (ncclmpi, preloaded,
 *            stages it through pinned host memory)
 *   manual   what a program does without a CUDA-aware MPI: cudaMemcpy to (or from) a malloc'ed
 *            buffer around the same call on it
 *   host     the same call on a host buffer, no copy (the file system's own time)
 * Every write and read is checked against the data (a read's buffer is poisoned first). Medians
 * over the iterations of the slowest rank's time; GB/s of the whole job's bytes.
 *
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so io_bench [-b 1M] [-e 256M] [-f 4] [-n 5] [-d DIR] [-o out.csv]
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

enum { W_MPI, W_MANUAL, W_HOST, NWAY };
static const char *const way_names[NWAY] = {"mpi", "manual", "host"};
static int rank, size;

static double timed(int write, int way, MPI_File fh, MPI_Offset off, void *dev, char *host, size_t n)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    MPI_Status st;
    const int count = (int)n;
    if (write) {
        if (way == W_MANUAL) CUDACHECK(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost));
        MPI_File_write_at_all(fh, off, way == W_MPI ? dev : host, count, MPI_BYTE, &st);
    } else {
        MPI_File_read_at_all(fh, off, way == W_MPI ? dev : host, count, MPI_BYTE, &st);
        if (way == W_MANUAL) CUDACHECK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
    }
    double t = bench_now() - t0, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t b = 1 << 20, e = (size_t)256 << 20;
    int f = 4, iters = 5;
    const char *out = NULL, *dir = getenv("TMPDIR");
    for (int i = 1; i + 1 < argc; i += 2) {
        if (bench_sweep_opt(argv[i], argv[i + 1], &b, &e, &f, &out)) continue;
        if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) dir = argv[i + 1];
    }
    if (e > ((size_t)1 << 31) - 1) e = ((size_t)1 << 31) - 1;  /* (an int count of bytes) */
    int ndev = 0;
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(rank % ndev));
    char path[512] = "";
    if (rank == 0) snprintf(path, sizeof(path), "%s/ncclmpi_io_bench.%d.dat", dir && *dir ? dir : "/tmp", (int)getpid());
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &fh)) {
        if (rank == 0) fprintf(stderr, "io_bench: cannot open %s\n", path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *dev, *host = malloc(e), *want = malloc(e), *check = malloc(e);
    CUDACHECK(cudaMalloc((void **)&dev, e));
    for (size_t i = 0; i < e; i++) want[i] = (char)(i * 131 + rank * 7 + (i >> 12));
    FILE *csv = rank == 0 && out ? fopen(out, "w") : NULL;
    if (csv) fprintf(csv, "op,bytes_per_rank,way,median_s,gbps\n");
    if (rank == 0)
        printf("# io_bench: %d ranks, file %s; median of %d, slowest rank; GB/s of all ranks' bytes\n"
               "%-6s %12s %12s %12s %12s %9s %9s\n", size, path, iters, "op", "bytes/rank", "mpi(ms)", "manual(ms)",
               "host(ms)", "mpi/man", "GB/s mpi");
    int bad = 0;
    double *ts = malloc(sizeof(double) * iters);
    for (size_t n = b; n <= e; n *= f) {
        const MPI_Offset off = (MPI_Offset)rank * (MPI_Offset)n;
        for (int write = 1; write >= 0; write--) {
            double med[NWAY];
            for (int w = 0; w < NWAY; w++) {
                for (int it = 0; it < iters; it++) {
                    if (write) {
                        CUDACHECK(cudaMemcpy(dev, want, n, cudaMemcpyHostToDevice));
                        memcpy(host, want, n);
                    } else {
                        CUDACHECK(cudaMemset(dev, 0x5a, n));
                        memset(host, 0x5a, n);
                    }
                    ts[it] = timed(write, w, fh, off, dev, host, n);
                    if (!write) {  /* the data read back */
                        if (w == W_HOST) memcpy(check, host, n);
                        else CUDACHECK(cudaMemcpy(check, dev, n, cudaMemcpyDeviceToHost));
                        bad += memcmp(check, want, n) != 0;
                    }
                }
                qsort(ts, iters, sizeof(double), bench_cmp_double);
                med[w] = ts[iters / 2];
                if (csv)
                    fprintf(csv, "%s,%zu,%s,%.6e,%.3f\n", write ? "write" : "read", n, way_names[w], med[w],
                            (double)n * size / med[w] / 1e9);
            }
            if (rank == 0)
                printf("%-6s %12zu %12.3f %12.3f %12.3f %9.2f %9.2f\n", write ? "write" : "read", n, med[W_MPI] * 1e3,
                       med[W_MANUAL] * 1e3, med[W_HOST] * 1e3, med[W_MPI] / med[W_MANUAL], (double)n * size / med[W_MPI] / 1e9);
        }
        if (n > e / f) break;
    }
    int allbad = 0;
    MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("# data checked: %s\n", allbad ? "WRONG" : "ok");
    if (csv) fclose(csv);
    MPI_File_close(&fh);
    cudaFree(dev);
    free(host);
    free(want);
    free(check);
    free(ts);
    MPI_Finalize();
    return allbad ? 1 : 0;
}
