/* comm_bench: what a communicator costs when a program makes one per use, on device buffers:
 *   dup+free         20 x (MPI_Comm_dup of MPI_COMM_WORLD + MPI_Comm_free), no device call
 *   dup+coll+free    20 x (MPI_Comm_dup + one device MPI_Allreduce of B bytes + MPI_Comm_free): the
 *                    first device collective of each new communicator makes (or, with
 *                    NCCLMPI_COMM_CACHE, takes over) its NCCL communicator or shared-GPU window
 *   split+coll+free  the same with MPI_Comm_split (color 0, key: rank): same processes, same order
 *   kept             20 x the same MPI_Allreduce on one communicator made once
 * µs per iteration, median of -r repetitions, the slowest rank's. Any GPU layout (ranks sharing a
 * GPU included). Run it twice, with NCCLMPI_COMM_CACHE=0 and without, to see what keeping costs buy:
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so comm_bench [-s 8,1M] [-r 7] [-o out.csv]
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { DUP, DUP_COLL, SPLIT_COLL, KEPT, NMODE };
static const char *const mode_name[NMODE] = {"dup+free", "dup+coll+free", "split+coll+free", "kept"};

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, reps = 7;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t sizes[8] = {8, 1 << 20};
    int nsizes = 2;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) out = argv[i + 1];
        else if (!strcmp(argv[i], "-s")) {
            nsizes = 0;
            for (char *p = strtok(argv[i + 1], ","); p && nsizes < 8; p = strtok(NULL, ",")) sizes[nsizes++] = bench_parse_size(p);
        }
    }
    if (reps < 1 || reps > 101) reps = 7;
    int ndev = 0;
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(rank % ndev));
    size_t most = 0;
    for (int i = 0; i < nsizes; i++) most = sizes[i] > most ? sizes[i] : most;
    float *d;
    CUDACHECK(cudaMalloc((void **)&d, most + 8));
    CUDACHECK(cudaMemset(d, 0, most + 8));
    MPI_Allreduce(MPI_IN_PLACE, d, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* MPI_COMM_WORLD's side */
    MPI_Comm kept;
    MPI_Comm_dup(MPI_COMM_WORLD, &kept);
    FILE *csv = NULL;
    if (rank == 0 && out && (csv = fopen(out, "w"))) fprintf(csv, "mode,bytes,ranks,gpus,us_per_iteration\n");
    const char *cache = getenv("NCCLMPI_COMM_CACHE");
    if (rank == 0)
        printf("# comm_bench: %d ranks, %d GPU(s), NCCLMPI_COMM_CACHE=%s; us per iteration (median of %d x 20, slowest rank)\n",
               size, ndev, cache ? cache : "(default)", reps);
    double *t = malloc(reps * sizeof(double));
    for (int si = 0; si < nsizes; si++)
        for (int m = 0; m < NMODE; m++) {
            if (m == DUP && si > 0) continue;
            const int count = (int)(sizes[si] / sizeof(float)) ? (int)(sizes[si] / sizeof(float)) : 1;
            for (int rep = -1; rep < reps; rep++) {
                MPI_Barrier(MPI_COMM_WORLD);
                const double t0 = bench_now();
                for (int i = 0; i < 20; i++) {
                    MPI_Comm c = kept;
                    if (m == DUP || m == DUP_COLL) MPI_Comm_dup(MPI_COMM_WORLD, &c);
                    if (m == SPLIT_COLL) MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c);
                    if (m != DUP) MPI_Allreduce(MPI_IN_PLACE, d, count, MPI_FLOAT, MPI_SUM, c);
                    if (c != kept) MPI_Comm_free(&c);
                }
                if (rep >= 0) t[rep] = (bench_now() - t0) * 1e6 / 20;
            }
            double med, worst;
            qsort(t, reps, sizeof(double), bench_cmp_double);
            med = t[reps / 2];
            MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0) {
                printf("%-16s %10zu B %12.1f us\n", mode_name[m], m == DUP ? (size_t)0 : sizes[si], worst);
                if (csv) fprintf(csv, "%s,%zu,%d,%d,%.2f\n", mode_name[m], m == DUP ? (size_t)0 : sizes[si], size, ndev, worst);
            }
        }
    if (csv) fclose(csv);
    free(t);
    MPI_Comm_free(&kept);
    CUDACHECK(cudaFree(d));
    MPI_Finalize();
    return 0;
}
