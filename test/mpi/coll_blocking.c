/* Blocking collectives on host buffers: MPI_Allreduce Reduce Bcast Allgather Allgatherv
 * Alltoall Alltoallv Alltoallw Reduce_scatter Reduce_scatter_block Gather Gatherv Scatter
 * Scatterv Scan Exscan Barrier, on MPI_COMM_WORLD, on a communicator with the ranks in reverse
 * order (roots and displacements are ranks of the communicator, not of the world) and on the
 * halves of a split (odd sizes). The test bodies are in coll_body.h. */
#define NB 0
#include "common.h"
#include "coll_body.h"

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    types_create();
    rcases_init();
    mtypes_init();
    run_all(MPI_COMM_WORLD, "MPI_COMM_WORLD");

    MPI_Comm rev, half;
    if (OK(Comm_split, MPI_COMM_WORLD, 0, tu.size - 1 - tu.rank, &rev)) {
        run_all(rev, "reversed MPI_COMM_WORLD");
        MPI_Comm_free(&rev);
    }
    /* halves: sizes differ when the world size is odd */
    if (tu.size > 2 && OK(Comm_split, MPI_COMM_WORLD, tu.rank % 2, tu.rank, &half)) {
        run_all(half, tu.rank % 2 ? "odd half" : "even half");
        MPI_Comm_free(&half);
    }
    types_free();
    return tu_finalize();
}
