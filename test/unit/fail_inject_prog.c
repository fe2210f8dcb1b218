/* fail_inject_prog SCENARIO: one scenario of the failure-injection matrix (test/unit/fail_inject.sh,
 * on the stand-in driver and NCCL, a device per rank, streams running later as a GPU's). The
 * script fails one call of the stand-ins on one rank (FAKE_FAIL, test/unit/fake_fail.h) inside the
 * scenario's window, which this program marks on stderr ("fail_inject: window begin/end"), so that a
 * run with FAKE_FAIL_TRACE=1 lists the calls the window makes. Scenarios, on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN whose NCCL communicator a blocking allreduce made before
 * the window (except create):
 *   create     the communicator's first device allreduce (its NCCL communicator made and connected)
 *   allreduce  a blocking MPI_Allreduce of 4096 ints as one strided vector type (device scratch,
 *              packs and unpacks)
 *   bcast      a blocking MPI_Bcast of 4096 ints from rank 0, strided on every rank
 *   iallreduce one MPI_Iallreduce and MPI_Wait
 *   burst      16 MPI_Iallreduce of 256 ints back to back and MPI_Waitall (a fused group)
 *   runs       no failure: an allreduce whose datatype on rank 0 has more than 65536 runs (an
 *              indexed type), contiguous ints on the other ranks (the same type signature)
 * The window's result on each rank is the error class of its first failure (0: none), from the
 * scenario's calls, or else from one more blocking allreduce on the same communicator (a rank whose
 * own part completed learns a peer's failure there). Every rank prints "fail_inject: rank R class
 * C"; the script compares them. Results of calls that succeeded are checked against the sums over
 * the ranks (outputs poisoned first). Then a fresh duplicate of MPI_COMM_WORLD must give a right
 * blocking allreduce on every rank ("fail_inject: rank R fresh ok"). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { N = 4096, NB = 16, NS = 256, BUFSZ = 4 << 20 };
static CUdeviceptr bufs[4];
static int rank, size, bad;

static int val(int k, int i, int q) { return k * 1009 + i * 3 + q * 7 + 1; }
static int sum(int k, int i)
{
    int s = 0;
    for (int q = 0; q < size; q++) s += val(k, i, q);
    return s;
}
static void expect(const int *got, int k, int n, int stride, const char *what)
{
    for (int i = 0; i < n; i++)
        if (got[(size_t)i * stride] != sum(k, i)) {
            if (bad++ < 5)
                fprintf(stderr, "fail_inject: FAIL: rank %d, %s: element %d is %d, expected %d\n", rank, what, i,
                        got[(size_t)i * stride], sum(k, i));
            return;
        }
}
static int cls(int rc)
{
    int c = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &c);
    return c;
}
static int *dev(int i) { return (int *)(uintptr_t)bufs[i]; }

/* a blocking allreduce of N ints on c, checked; its error class */
static int plain_allreduce(MPI_Comm c, int k, const char *what)
{
    int *s = dev(0), *r = dev(1);
    for (int i = 0; i < N; i++) s[i] = val(k, i, rank);
    memset(r, 0xa5, N * sizeof(int));
    const int e = cls(MPI_Allreduce(s, r, N, MPI_INT, MPI_SUM, c));
    if (!e) expect(r, k, N, 1, what);
    return e;
}

static MPI_Comm dup_world(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return c;
}

static int strided_allreduce(MPI_Comm c)
{
    MPI_Datatype v;
    MPI_Type_vector(N, 1, 2, MPI_INT, &v);
    MPI_Type_commit(&v);
    int *s = dev(0), *r = dev(1);  /* (one datatype for both buffers) */
    for (int i = 0; i < N; i++) s[2 * i] = val(2, i, rank), s[2 * i + 1] = -1;
    memset(r, 0xa5, 2 * N * sizeof(int));
    const int e = cls(MPI_Allreduce(s, r, 1, v, MPI_SUM, c));
    if (!e) expect(r, 2, N, 2, "strided allreduce");
    MPI_Type_free(&v);
    return e;
}

static int strided_bcast(MPI_Comm c)
{
    MPI_Datatype v;
    MPI_Type_vector(N, 1, 2, MPI_INT, &v);
    MPI_Type_commit(&v);
    int *b = dev(1);
    memset(b, 0xa5, 2 * N * sizeof(int));
    if (rank == 0)
        for (int i = 0; i < N; i++) b[2 * i] = sum(3, i);
    const int e = cls(MPI_Bcast(b, 1, v, 0, c));
    if (!e) expect(b, 3, N, 2, "strided bcast");
    MPI_Type_free(&v);
    return e;
}

static int waitall_class(int n, MPI_Request *q)
{
    MPI_Status st[NB];
    const int rc = MPI_Waitall(n, q, st);
    if (rc == MPI_SUCCESS) return 0;
    if (cls(rc) != MPI_ERR_IN_STATUS) return cls(rc);
    for (int i = 0; i < n; i++)
        if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING) return cls(st[i].MPI_ERROR);
    return MPI_ERR_IN_STATUS;
}

static int burst(MPI_Comm c, int nops)
{
    MPI_Request q[NB];
    int *p = dev(2);
    for (int k = 0; k < nops; k++)
        for (int i = 0; i < NS; i++) p[k * NS + i] = val(10 + k, i, rank);
    int e = 0;
    for (int k = 0; k < nops && !e; k++) e = cls(MPI_Iallreduce(MPI_IN_PLACE, p + k * NS, NS, MPI_INT, MPI_SUM, c, &q[k]));
    if (e) return e;  /* (not reached in the matrix: a launch failure arrives with the request) */
    e = waitall_class(nops, q);
    for (int k = 0; k < nops && !e; k++) expect(p + k * NS, 10 + k, NS, 1, "burst");
    return e;
}

/* rank 0 reduces through an indexed type of more than 65536 runs (blocks of 1 and 2 ints, gaps
 * of 1): NCCL's route packs it where its layout cannot be decoded into runs */
static int many_runs(MPI_Comm c)
{
    enum { NBLK = 70000 };
    int *len = malloc(NBLK * sizeof(int)), *disp = malloc(NBLK * sizeof(int)), n = 0, at = 0;
    for (int b = 0; b < NBLK; b++) {
        len[b] = 1 + b % 2;
        disp[b] = at;
        at += len[b] + 1;
        n += len[b];
    }
    MPI_Datatype t;
    MPI_Type_indexed(NBLK, len, disp, MPI_INT, &t);
    MPI_Type_commit(&t);
    int *s = dev(0), *r = dev(1);  /* (one datatype for both buffers) */
    memset(s, 0xff, (size_t)at * sizeof(int));
    for (int b = 0, i = 0; b < NBLK; b++)
        for (int j = 0; j < len[b]; j++, i++) s[rank == 0 ? disp[b] + j : i] = val(4, i, rank);
    memset(r, 0xa5, (size_t)at * sizeof(int));
    const int e = cls(rank == 0 ? MPI_Allreduce(s, r, 1, t, MPI_SUM, c) : MPI_Allreduce(s, r, n, MPI_INT, MPI_SUM, c));
    if (!e && rank != 0) expect(r, 4, n, 1, "many runs");
    if (!e && rank == 0) {
        for (int b = 0, i = 0; b < NBLK && !bad; b++) {
            for (int j = 0; j < len[b]; j++, i++)
                if (r[disp[b] + j] != sum(4, i) && bad++ < 5)
                    fprintf(stderr, "fail_inject: FAIL: rank 0, many runs: element %d is %d, expected %d\n", i, r[disp[b] + j], sum(4, i));
            if (r[disp[b] + len[b]] != (int)0xa5a5a5a5 && bad++ < 5)
                fprintf(stderr, "fail_inject: FAIL: rank 0, many runs: the gap after block %d was written\n", b);
        }
    }
    MPI_Type_free(&t);
    free(len);
    free(disp);
    return e;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *sc = argc > 1 ? argv[1] : "allreduce";
    if (!stand_in_driver("fail_inject", 4, BUFSZ, bufs)) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Comm c = dup_world();
    const int create = !strcmp(sc, "create");
    if (!create) plain_allreduce(c, 0, "setup allreduce");
    MPI_Barrier(MPI_COMM_WORLD);
    fprintf(stderr, "fail_inject: r%d window begin\n", rank);
    int e = 0;
    if (create) e = plain_allreduce(c, 1, "first allreduce");
    else if (!strcmp(sc, "allreduce")) e = strided_allreduce(c);
    else if (!strcmp(sc, "bcast")) e = strided_bcast(c);
    else if (!strcmp(sc, "iallreduce")) e = burst(c, 1);
    else if (!strcmp(sc, "burst")) e = burst(c, NB);
    else if (!strcmp(sc, "runs")) e = many_runs(c);
    else {
        fprintf(stderr, "fail_inject: unknown scenario %s\n", sc);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!e) e = plain_allreduce(c, 5, "allreduce after");
    fprintf(stderr, "fail_inject: r%d window end\n", rank);
    printf("fail_inject: rank %d class %d\n", rank, e);
    fflush(stdout);
    MPI_Comm f = dup_world();
    const int before = bad, fe = plain_allreduce(f, 6, "fresh communicator");
    if (!fe && bad == before) printf("fail_inject: rank %d fresh ok\n", rank);
    else printf("fail_inject: rank %d fresh FAILED (class %d)\n", rank, fe);
    MPI_Comm_free(&f);
    MPI_Comm_free(&c);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && !all) printf("fail_inject_prog: ok\n");
    MPI_Finalize();
    return 0;
}
