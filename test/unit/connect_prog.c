/* connect_prog: first uses of NCCL's connections in orders that differ by rank
 * (test/unit/connect.sh: the stand-in driver with a device per rank, its streams running later as
 * a GPU's, and the stand-in NCCL's several-rank mode, which connects an algorithm or a peer at its
 * first use on the host, as NCCL 2.22 and later do, waiting for the peers without MPI progress).
 * Each scenario makes fresh communicators (duplicates of MPI_COMM_WORLD, their NCCL communicators
 * made by a blocking allreduce of one int), then:
 *   coll      even ranks MPI_Iallreduce 128 KiB on A then B, odd ranks B then A, one MPI_Waitall
 *             (the first calls of a larger algorithm than the one the creation used)
 *   alltoall  the same with MPI_Ialltoall (NCCL's sends and receives to every peer)
 *   group     one ncclmpi_group_begin/end holding both, issued in opposite orders
 *   progress  rank 0 posts a 4 MiB host MPI_Isend to rank 1, then a blocking device MPI_Allreduce
 *             of 128 KiB on A; rank 1 receives the message first, then joins the allreduce
 *             (rank 0's real MPI must progress while its allreduce waits)
 *   cold      alltoalls crossing, then blocking, then crossing again: with more ranks than
 *             NCCLMPI_CONNECT_PEERS (CONNECT_PROG_COLD=1), the first crossing ones are staged until
 *             the blocking ones connect every peer; then blocking alltoalls as the first device
 *             calls of two more communicators (made and connected in them), crossing ones after
 * argv[1] names one scenario (default: all). Outputs are poisoned first and checked against the
 * sums over the ranks, and every device call must have run on the NCCL route. Prints
 * "connect_prog: ok" when every rank passed. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { N = 32768, NBUF = 4, MSG = 4 << 20 };  /* N ints: 128 KiB */
static CUdeviceptr bufs[NBUF];
static int rank, size, failures;

static int value(int sc, int k, int i, int q) { return sc * 1000003 + k * 100003 + i + q * 7; }

static void fill(int *p, int sc, int k, int n)
{
    for (int i = 0; i < n; i++) p[i] = value(sc, k, i, rank);
}
static void check_sum(const int *p, int sc, int k, const char *what)
{
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int q = 0; q < size; q++) want += value(sc, k, i, q);
        if (p[i] != want) {
            if (failures++ < 10)
                fprintf(stderr, "connect_prog: FAIL: rank %d, %s, operation %d: element %d is %d, expected %d\n", rank, what,
                        k, i, p[i], want);
            return;
        }
    }
}

/* a duplicate of MPI_COMM_WORLD whose NCCL communicator a blocking allreduce of one int made */
static MPI_Comm fresh(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    int *one = (int *)(uintptr_t)bufs[NBUF - 1];
    *one = 1;
    MPI_Allreduce(MPI_IN_PLACE, one, 1, MPI_INT, MPI_SUM, c);
    if (*one != size) failures++;
    return c;
}

static void two_allreduces(int sc, const char *what, int grouped)
{
    static int (*gbegin)(void), (*gend)(void);
    if (grouped && !gbegin) {
        gbegin = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
        gend = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
        if (!gbegin || !gend) {
            fprintf(stderr, "connect_prog: ncclmpi_group_begin/end not found (is libncclmpi preloaded?)\n");
            failures++;
            return;
        }
    }
    MPI_Comm c[2] = {fresh(), fresh()};
    MPI_Request q[2];
    int *p[2] = {(int *)(uintptr_t)bufs[0], (int *)(uintptr_t)bufs[1]};
    fill(p[0], sc, 0, N);
    fill(p[1], sc, 1, N);
    if (grouped) gbegin();
    for (int j = 0; j < 2; j++) {
        const int k = rank % 2 ? 1 - j : j;  /* even ranks A then B, odd ranks B then A */
        MPI_Iallreduce(MPI_IN_PLACE, p[k], N, MPI_INT, MPI_SUM, c[k], &q[k]);
    }
    if (grouped) gend();
    MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    check_sum(p[0], sc, 0, what);
    check_sum(p[1], sc, 1, what);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
}

/* alltoalls on c[0] and c[1], issued in opposite orders on even and odd ranks (blocking: one
 * after the other, in one order), checked */
static void alltoall_pair(MPI_Comm c[2], int sc, int blocking)
{
    MPI_Request q[2];
    const int per = 64;  /* ints to each rank */
    int *s[2] = {(int *)(uintptr_t)bufs[0], (int *)(uintptr_t)bufs[1]};
    int *r[2] = {s[0] + per * size, s[1] + per * size};
    int cr[2];  /* this rank in each communicator (its order may not be MPI_COMM_WORLD's) */
    for (int k = 0; k < 2; k++) {
        MPI_Comm_rank(c[k], &cr[k]);
        for (int i = 0; i < per * size; i++) s[k][i] = value(sc, k, i, cr[k]);
        memset(r[k], 0xa5, (size_t)per * size * sizeof(int));
    }
    for (int j = 0; j < 2; j++) {
        const int k = blocking ? j : rank % 2 ? 1 - j : j;
        if (blocking) MPI_Alltoall(s[k], per, MPI_INT, r[k], per, MPI_INT, c[k]);
        else MPI_Ialltoall(s[k], per, MPI_INT, r[k], per, MPI_INT, c[k], &q[k]);
    }
    if (!blocking) MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    for (int k = 0; k < 2; k++)
        for (int from = 0; from < size; from++)
            for (int i = 0; i < per; i++) {
                const int want = value(sc, k, cr[k] * per + i, from);
                if (r[k][from * per + i] != want && failures++ < 10)
                    fprintf(stderr, "connect_prog: FAIL: rank %d, alltoall %d: element %d from rank %d is %d, expected %d\n",
                            rank, k, i, from, r[k][from * per + i], want);
            }
}

static void two_alltoalls(int sc)
{
    MPI_Comm c[2] = {fresh(), fresh()};
    alltoall_pair(c, sc, 0);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
}

/* communicators whose sends and receives are not connected at creation (more ranks than
 * NCCLMPI_CONNECT_PEERS): crossing nonblocking alltoalls (staged until connected), blocking ones
 * (which connect every peer), crossing nonblocking ones again (on NCCL now) */
static void cold_alltoalls(int sc)
{
    MPI_Comm c[2] = {fresh(), fresh()};
    alltoall_pair(c, sc, 0);
    alltoall_pair(c, sc + 1, 1);
    alltoall_pair(c, sc + 2, 0);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
    /* communicators whose first device call is a blocking alltoall: made and connected in it, so
     * the crossing nonblocking ones after it run on NCCL at once */
    for (int k = 0; k < 2; k++)  /* (ranks reversed: no kept NCCL side of these processes to take over) */
        MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &c[k]);
    alltoall_pair(c, sc + 3, 1);
    alltoall_pair(c, sc + 4, 0);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
}

static void progress(int sc)
{
    MPI_Comm c = fresh();
    char *msg = malloc(MSG);
    int *p = (int *)(uintptr_t)bufs[0];
    fill(p, sc, 0, N);
    if (rank == 0) {
        MPI_Request r;
        memset(msg, 0x3c, MSG);
        MPI_Isend(msg, MSG, MPI_CHAR, 1, 9, MPI_COMM_WORLD, &r);
        MPI_Allreduce(MPI_IN_PLACE, p, N, MPI_INT, MPI_SUM, c);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        if (rank == 1) {
            memset(msg, 0, MSG);
            MPI_Recv(msg, MSG, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] != 0x3c || msg[MSG - 1] != 0x3c) failures++;
        }
        MPI_Allreduce(MPI_IN_PLACE, p, N, MPI_INT, MPI_SUM, c);
    }
    check_sum(p, sc, 0, "progress");
    free(msg);
    MPI_Comm_free(&c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!stand_in_driver("connect_prog", NBUF, N * sizeof(int) * 2, bufs)) {
        MPI_Finalize();
        return 2;
    }
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *const names[] = {"coll", "alltoall", "group", "progress", "cold"};
    int ran = 0;
    for (int sc = 0; sc < 5; sc++) {
        if (only && strcmp(only, names[sc])) continue;
        ran++;
        switch (sc) {
        case 0: two_allreduces(sc, "coll", 0); break;
        case 1: two_alltoalls(sc); break;
        case 2: two_allreduces(sc, "group", 1); break;
        case 3: progress(sc); break;
        case 4: cold_alltoalls(10 * sc); break;
        }
    }
    /* every device call ran on the NCCL route (a failed connection would stage them: right
     * results, and nothing of what this program is about) */
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    const char *const fns[] = {"MPI_Iallreduce", "MPI_Ialltoall", "MPI_Allreduce"};
    for (int f = 0; f < 3; f++) {
        unsigned long long staged = 0, nccl = 0;
        if (!route || route(fns[f], 2 /* NCCLMPI_ROUTE_STAGED */, &staged) || route(fns[f], 1 /* NCCL */, &nccl)) {
            fprintf(stderr, "connect_prog: no route counters (is libncclmpi preloaded?)\n");
            failures++;
            break;
        }
        /* CONNECT_PROG_COLD=1 (with NCCLMPI_CONNECT_PEERS below the ranks, "cold" alone): the
         * first two nonblocking alltoalls are staged, nothing else */
        const char *cold = getenv("CONNECT_PROG_COLD");
        const unsigned long long want = cold && *cold == '1' && f == 1 ? 2 : 0;
        if (staged != want && failures++ < 10)
            fprintf(stderr, "connect_prog: FAIL: rank %d: %llu %s calls staged (expected %llu), %llu on NCCL\n", rank,
                    staged, fns[f], want, nccl);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (all || !ran) return 1;
    if (rank == 0) printf("connect_prog: ok (%d ranks, %d scenarios)\n", size, ran);
    return 0;
}
