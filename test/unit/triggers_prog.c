/* triggers_prog: bursts of nonblocking device allreduces on the NCCL route, flushed by different
 * calls on different ranks (test/unit/triggers.sh: the stand-in driver with a device per rank and
 * the stand-in NCCL's several-rank mode, which aborts where the ranks' NCCL calls differ; the
 * script's time limit catches a hang). Each scenario issues a burst of BURST MPI_Iallreduce (ints,
 * sums; back to back, so each rank queues them for coalescing, and fused where the groups allow),
 * then the ranks reach them through the same call (waitall: one agreed group, its allreduces
 * fused) or through different calls (each rank that may block proposes singletons):
 *   waitall  every rank MPI_Waitall
 *   barrier  even ranks MPI_Barrier then MPI_Waitall, odd ranks MPI_Waitall then MPI_Barrier
 *   test     even ranks MPI_Testall in a loop, odd ranks MPI_Wait on each request, last first
 *   host     even ranks a host-buffer MPI_Allreduce on the same communicator, then MPI_Waitall;
 *            odd ranks the other way round
 *   free     every rank frees its duplicate communicator with the requests outstanding, even ranks
 *            after a host MPI_Barrier on MPI_COMM_WORLD, odd ranks before it, then MPI_Waitall
 * Where the stand-in's streams run later (FAKE_CUDA_ASYNC=1), two more: a host message crossing
 * isolated device calls, and two communicators issued in opposite orders on even and odd ranks.
 * Every output is poisoned first and checked against the sum over the ranks. Prints
 * "triggers_prog: ok" when every rank passed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "stand_in.h"

enum { BURST = 24, N = 300, ROUNDS = 5 };
static CUdeviceptr bufs[BURST + 1];
static int rank, size, failures;

static int value(int round, int k, int i, int q) { return round * 100000 + k * 1000 + i + q * 7; }

static void check(int *p, int round, int k, const char *scenario)
{
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int q = 0; q < size; q++) want += value(round, k, i, q);
        if (p[i] != want) {
            if (failures++ < 10)
                fprintf(stderr, "triggers_prog: FAIL: rank %d, %s round %d, operation %d: element %d is %d, expected %d\n", rank,
                        scenario, round, k, i, p[i], want);
            return;
        }
    }
}

static void burst(MPI_Comm c, int round, MPI_Request *q)
{
    for (int k = 0; k < BURST; k++) {
        int *p = (int *)(uintptr_t)bufs[k];
        for (int i = 0; i < N; i++) p[i] = value(round, k, i, rank);
        if (MPI_Iallreduce(MPI_IN_PLACE, p, N, MPI_INT, MPI_SUM, c, &q[k]) != MPI_SUCCESS) failures++;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!stand_in_driver("triggers_prog", BURST + 1, N * sizeof(int), bufs)) {
        MPI_Finalize();
        return 2;
    }
    const char *const scenarios[] = {"waitall", "barrier", "test", "host", "free"};
    const int even = rank % 2 == 0;
    MPI_Request q[BURST];
    for (int sc = 0; sc < 5; sc++)
        for (int round = 0; round < ROUNDS; round++) {
            MPI_Comm c;
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
            int *one = (int *)(uintptr_t)bufs[BURST];  /* a blocking collective: its NCCL communicator */
            *one = 1;
            MPI_Allreduce(MPI_IN_PLACE, one, 1, MPI_INT, MPI_SUM, c);
            if (*one != size) failures++;
            burst(c, round, q);
            int host = rank, sum = 0, done = 0;
            switch (sc) {
            case 0:
                MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE);
                break;
            case 1:
                if (even) MPI_Barrier(c);
                MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE);
                if (!even) MPI_Barrier(c);
                break;
            case 2:
                if (even)
                    while (!done) MPI_Testall(BURST, q, &done, MPI_STATUSES_IGNORE);
                else
                    for (int k = BURST - 1; k >= 0; k--) MPI_Wait(&q[k], MPI_STATUS_IGNORE);
                break;
            case 3:
                if (even) MPI_Allreduce(&host, &sum, 1, MPI_INT, MPI_SUM, c);
                MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE);
                if (!even) MPI_Allreduce(&host, &sum, 1, MPI_INT, MPI_SUM, c);
                if (sum != size * (size - 1) / 2) failures++;
                break;
            case 4:
                if (even) MPI_Barrier(MPI_COMM_WORLD);
                MPI_Comm_free(&c);
                if (!even) MPI_Barrier(MPI_COMM_WORLD);
                MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE);
                break;
            }
            for (int k = 0; k < BURST; k++) check((int *)(uintptr_t)bufs[k], round, k, scenarios[sc]);
            if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
        }
    /* where the stand-in's streams run later, as a GPU's (FAKE_CUDA_ASYNC=1: a launch returns at
     * once), orders that would leave a host waiting at a synchronous stand-in's launch:
     *   crossing  rank 0 MPI_Iallreduce then a host MPI_Send to rank 1, which receives first and
     *             issues its MPI_Iallreduce after (each launched at its call, isolated)
     *   two comms even ranks issue on communicator A then B, odd ranks B then A, one MPI_Waitall */
    const char *async = getenv("FAKE_CUDA_ASYNC");
    const int crossings = async && *async == '1' && size > 1;
    for (int round = 0; crossings && round < ROUNDS; round++) {
        MPI_Comm a, b2;
        MPI_Comm_dup(MPI_COMM_WORLD, &a);
        MPI_Comm_dup(MPI_COMM_WORLD, &b2);
        int *one = (int *)(uintptr_t)bufs[BURST];
        *one = 1;
        MPI_Allreduce(MPI_IN_PLACE, one, 1, MPI_INT, MPI_SUM, a);
        *one = 1;
        MPI_Allreduce(MPI_IN_PLACE, one, 1, MPI_INT, MPI_SUM, b2);
        int *p0 = (int *)(uintptr_t)bufs[0], *p1 = (int *)(uintptr_t)bufs[1], token = 7;
        for (int i = 0; i < N; i++) p0[i] = value(round, 0, i, rank);
        if (rank == 1) MPI_Recv(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Iallreduce(MPI_IN_PLACE, p0, N, MPI_INT, MPI_SUM, a, &q[0]);
        if (rank == 0) MPI_Send(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
        MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        check(p0, round, 0, "crossing");
        for (int i = 0; i < N; i++) p0[i] = value(round, 1, i, rank), p1[i] = value(round, 2, i, rank);
        if (even) {
            MPI_Iallreduce(MPI_IN_PLACE, p0, N, MPI_INT, MPI_SUM, a, &q[0]);
            MPI_Iallreduce(MPI_IN_PLACE, p1, N, MPI_INT, MPI_SUM, b2, &q[1]);
        } else {
            MPI_Iallreduce(MPI_IN_PLACE, p1, N, MPI_INT, MPI_SUM, b2, &q[1]);
            MPI_Iallreduce(MPI_IN_PLACE, p0, N, MPI_INT, MPI_SUM, a, &q[0]);
        }
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        check(p0, round, 1, "two comms");
        check(p1, round, 2, "two comms");
        MPI_Comm_free(&a);
        MPI_Comm_free(&b2);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (all) return 1;
    if (rank == 0)
        printf("triggers_prog: ok (%d ranks, %d scenarios x %d rounds of %d%s)\n", size, 5, ROUNDS, BURST,
               crossings ? "; crossing and two-communicator orders" : "");
    return 0;
}
