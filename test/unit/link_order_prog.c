/* link_order_prog: a plain MPI program (host buffers), relinked in the ways test/unit/link_order.sh
 * tries. It checks its allreduce against the expected sum; ncclmpi's presence is judged from
 * outside (ncclmpi_check, NCCLMPI_STATS, the start-up warning). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, v, sum = -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    v = rank + 1;
    MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size + 1) / 2) {
        fprintf(stderr, "link_order_prog: rank %d: sum %d, expected %d\n", rank, sum, size * (size + 1) / 2);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return 0;
}
