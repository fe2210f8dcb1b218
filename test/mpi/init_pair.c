/* init_pair: after MPI_Init, rank 0 sends one int to rank 1 and rank 1 receives it; no
 * collective call (init_partial.sh: a rank that never joins ncclmpi's start-up reductions, as one
 * without libncclmpi, must leave the others saying what they wait for, not waiting silently). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0, v = 42;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size >= 2 && rank == 0) MPI_Send(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
    if (size >= 2 && rank == 1) MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("init_pair: rank %d got %d\n", rank, v);
    MPI_Finalize();
    return v == 42 ? 0 : 1;
}
