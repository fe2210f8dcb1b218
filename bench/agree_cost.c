/* agree_cost: what NCCLMPI_AGREE=1 adds to a blocking collective: one host allreduce of one int
 * (MIN) over the communicator. Median of 15 batches of 2000. No GPU needed.
 *   mpirun -np 4 agree_cost */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, x = 1, y;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double t[15];
    for (int i = 0; i < 1000; i++) PMPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    for (int b = 0; b < 15; b++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < 2000; i++) PMPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        t[b] = (MPI_Wtime() - t0) / 2000 * 1e6;
    }
    qsort(t, 15, sizeof(double), cmp);
    if (rank == 0) printf("agree_cost: %d ranks: one host MPI_Allreduce(1 int, MIN) = %.2f us (median)\n", size, t[7]);
    MPI_Finalize();
    return 0;
}
