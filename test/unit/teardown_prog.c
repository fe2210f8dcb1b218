/* teardown_prog: communicators whose NCCL sides each rank came to know in another order, for
 * test/unit/teardown.sh. Two duplicates of MPI_COMM_WORLD, A and B; rank 0 touches A first (a
 * message to itself on host memory), every other rank B (the same); then every rank makes both
 * NCCL sides, B's first (a device MPI_Allreduce on each, checked). ncclmpi's states are then in
 * another order on rank 0 than on the others; MPI_Finalize must destroy the sides in one order on
 * every rank (NCCLMPI_LOG=DEBUG names each destroy: the script compares them). Last, a lone
 * MPI_Iallreduce on B, whose agreement round nobody waits for, must be complete at MPI_Finalize.
 *   teardown_prog   (NCCLMPI_CUDA_LIB: the stand-in driver, already loaded) */
#define _GNU_SOURCE
#include <cuda.h>
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include "stand_in.h"

enum { N = 256 };

static void touch(MPI_Comm c)  /* a host message to itself: ncclmpi sees c */
{
    int r, x = 1, y = 0;
    MPI_Comm_rank(c, &r);
    MPI_Sendrecv(&x, 1, MPI_INT, r, 7, &y, 1, MPI_INT, r, 7, c, MPI_STATUS_IGNORE);
}

static int allreduce_ok(MPI_Comm c, int *in, int *out, int size)
{
    for (int i = 0; i < N; i++) out[i] = -1;
    MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, c);
    for (int i = 0; i < N; i++)
        if (out[i] != size * (i + 1)) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    CUdeviceptr bufs[2];
    if (!stand_in_driver("teardown_prog", 2, N * sizeof(int), bufs)) return 2;
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    touch(rank == 0 ? a : b);
    int *in = (int *)bufs[0], *out = (int *)bufs[1];
    for (int i = 0; i < N; i++) in[i] = i + 1;
    bad |= !allreduce_ok(b, in, out, size);
    bad |= !allreduce_ok(a, in, out, size);
    /* a lone nonblocking allreduce on B (launched at its call, its agreement round not awaited;
     * rank 0 late, so the others' rounds wait for it): the round is still in flight at
     * MPI_Finalize, which must complete it */
    if (rank == 0) usleep(300000);
    MPI_Request q;
    for (int i = 0; i < N; i++) out[i] = -1;
    MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, b, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    for (int i = 0; i < N; i++) bad |= out[i] != size * (i + 1);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("teardown_prog: %s\n", all ? "FAIL" : "ok");
    MPI_Finalize();  /* (a and b live on: destroyed there) */
    return all;
}
