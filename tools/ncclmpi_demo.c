/* ncclmpi_demo: a few MPI calls on host buffers, and on device buffers when a GPU is there,
 * printing the route ncclmpi gave each (host, nccl, staged). Run it under mpirun with
 * libncclmpi preloaded: `mpirun -np 2 ncclmpi_exec ncclmpi_demo`. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ncclmpi.h"

static int rank, size;

static void show(const char *fn, const char *what, ncclmpi_stats_t *before)
{
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    ncclmpi_stats_t now;
    if (!get || get(fn, &now) != 0) {
        if (rank == 0) printf("  MPI_%-14s %-34s route: (libncclmpi not loaded)\n", fn, what);
        return;
    }
    static const char *const names[] = {"host", "nccl", "staged", "error"};
    const char *route = "?";
    for (int r = 0; r < NCCLMPI_ROUTE_COUNT; r++)
        if (now.route[r] > before->route[r]) route = names[r];
    if (rank == 0) printf("  MPI_%-14s %-34s route: %s\n", fn, what, route);
    *before = now;
}

static void snap(const char *fn, ncclmpi_stats_t *s)
{
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    memset(s, 0, sizeof(*s));
    if (get) get(fn, s);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclmpi_stats_t ar, bc, sr;
    snap("Allreduce", &ar);
    snap("Bcast", &bc);
    snap("Sendrecv", &sr);
    double x = rank + 1, sum = 0;
    int v[4] = {rank, rank, rank, rank}, got[4];
    if (rank == 0) printf("ncclmpi demo: %d ranks\n", size);
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    show("Allreduce", "host doubles, SUM", &ar);
    if (rank == 0) printf("    sum of 1..%d = %g (expected %d)\n", size, sum, size * (size + 1) / 2);
    MPI_Bcast(v, 4, MPI_INT, size - 1, MPI_COMM_WORLD);
    show("Bcast", "host ints from the last rank", &bc);
    MPI_Sendrecv(v, 4, MPI_INT, (rank + 1) % size, 0, got, 4, MPI_INT, (rank + size - 1) % size, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    show("Sendrecv", "host ring", &sr);

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (rank == 0) printf("  (no GPU here: device-buffer calls skipped)\n");
    } else {
        cudaSetDevice(rank % ndev);
        float *d;
        cudaMalloc((void **)&d, 1024 * sizeof(float));
        cudaMemset(d, 0, 1024 * sizeof(float));
        MPI_Allreduce(MPI_IN_PLACE, d, 1024, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        show("Allreduce", "device floats, SUM", &ar);
        MPI_Allreduce(MPI_IN_PLACE, d, 1024, MPI_INT, MPI_BXOR, MPI_COMM_WORLD);
        show("Allreduce", "device ints, BXOR (no NCCL op)", &ar);
        MPI_Bcast(d, 1024, MPI_FLOAT, 0, MPI_COMM_WORLD);
        show("Bcast", "device floats", &bc);
        MPI_Sendrecv_replace(d, 1024, MPI_FLOAT, (rank + 1) % size, 0, (rank + size - 1) % size, 0, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
        cudaFree(d);
        if (rank == 0) printf("  (%d GPU(s); ranks sharing a GPU take the staged path)\n", ndev);
    }
    MPI_Finalize();
    return 0;
}
