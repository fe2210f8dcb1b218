/* agree_cost: the host-side agreements ncclmpi makes, over a duplicate of MPI_COMM_WORLD. Median of
 * 15 batches of 2000. No GPU needed.
 *   vote   NCCLMPI_AGREE=1: one MPI_Allreduce of one int (MIN) per blocking collective
 *   round  coalescing: one MPI_Iallreduce of one int (MIN) per group of nonblocking device
 *          collectives; "issue" is what a call pays when it does not wait for the result
 *          (proposal 1), "wait" when it does
 *   carrier  the NCCL route of Gatherv/Alltoallv (a rank may have no data): the same real MPI
 *          call with zero counts, which the ranks without data make with theirs
 *   mpirun -np 4 agree_cost */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"


enum { VOTE, ROUND_WAIT, ROUND_ISSUE, CARRIER_GATHERV, CARRIER_ALLTOALLV, NCASE };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, x = 1, y[2000];
    MPI_Comm c;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    PMPI_Comm_dup(MPI_COMM_WORLD, &c);
    static MPI_Request req[2000];
    int *zeros = calloc((size_t)size + 1, sizeof(int));
    char dummy[16];
    double med[NCASE];
    for (int k = 0; k < NCASE; k++) {
        double t[15];
        for (int b = -1; b < 15; b++) {
            PMPI_Barrier(c);
            double t0 = MPI_Wtime();
            for (int i = 0; i < 2000; i++) {
                if (k == VOTE) PMPI_Allreduce(&x, &y[0], 1, MPI_INT, MPI_MIN, c);
                else if (k == ROUND_WAIT) {
                    PMPI_Iallreduce(&x, &y[0], 1, MPI_INT, MPI_MIN, c, &req[0]);
                    PMPI_Wait(&req[0], MPI_STATUS_IGNORE);
                } else if (k == ROUND_ISSUE) {
                    PMPI_Iallreduce(&x, &y[i], 1, MPI_INT, MPI_MIN, c, &req[i]);
                } else if (k == CARRIER_GATHERV) {
                    PMPI_Gatherv(dummy, 0, MPI_BYTE, dummy, zeros, zeros, MPI_BYTE, 0, c);
                } else {
                    PMPI_Alltoallv(dummy, zeros, zeros, MPI_BYTE, dummy, zeros, zeros, MPI_BYTE, c);
                }
            }
            if (k == ROUND_ISSUE) {  /* issue only: the completions are timed apart */
                double t1 = MPI_Wtime();
                PMPI_Waitall(2000, req, MPI_STATUSES_IGNORE);
                t0 += MPI_Wtime() - t1;
            }
            if (b >= 0) t[b] = (MPI_Wtime() - t0) / 2000 * 1e6;
        }
        qsort(t, 15, sizeof(double), bench_cmp_double);
        med[k] = t[7];
    }
    if (rank == 0)
        printf("agree_cost: %d ranks: vote (MPI_Allreduce 1 int) %.2f us; round (MPI_Iallreduce 1 int) + wait %.2f us, "
               "issue only %.2f us; carrier MPI_Gatherv %.2f us, MPI_Alltoallv %.2f us (zero counts) (medians)\n", size,
               med[VOTE], med[ROUND_WAIT], med[ROUND_ISSUE], med[CARRIER_GATHERV], med[CARRIER_ALLTOALLV]);
    free(zeros);
    PMPI_Comm_free(&c);
    MPI_Finalize();
    return 0;
}
