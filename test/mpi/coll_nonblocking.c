/* Nonblocking collectives on host buffers: MPI_Iallreduce Ireduce Ibcast Iallgather
 * Iallgatherv Ialltoall Ialltoallv Ialltoallw Ireduce_scatter Ireduce_scatter_block Igather
 * Igatherv Iscatter Iscatterv Iscan Iexscan Ibarrier.
 *
 * 1. The bodies of coll_body.h, each call completed at once by one of the eight completion
 *    functions in turn (on MPI_COMM_WORLD and on a communicator with reversed ranks).
 * 2. Several collectives in flight at once, completed together (Waitall with null requests
 *    in the array, then Waitany/Testsome in whatever order they finish).
 * 3. A collective cannot complete before a late rank joined it: MPI_Test answers false.
 */
#define NB 1
#include "common.h"
#include "coll_body.h"

/* Seven collectives in flight together on C; completed by `how` (0 Waitall, 1 Waitany,
 * 2 Testsome, 3 Testall). */
static void t_outstanding(int how)
{
    enum { N = 1000, NR = 10 };
    int root = P - 1, mid = P / 2;
    int *ar_s = (int *)tu_alloc(N * sizeof(int)), *ar_r = (int *)tu_alloc(N * sizeof(int));
    int *bc = (int *)tu_alloc(N * sizeof(int)), *ag_r = (int *)tu_alloc((size_t)P * N * sizeof(int));
    int *a2a_s = (int *)tu_alloc((size_t)P * 3 * sizeof(int)), *a2a_r = (int *)tu_alloc((size_t)P * 3 * sizeof(int));
    double *rd_s = (double *)tu_alloc(N * sizeof(double)), *rd_r = (double *)tu_alloc(N * sizeof(double));
    int *sc_r = (int *)tu_alloc(N * sizeof(int)), *scan_s = (int *)tu_alloc(N * sizeof(int));
    MPI_Request req[NR];
    for (int i = 0; i < N; i++) {
        ar_s[i] = ival(R, i);
        scan_s[i] = ival(R, i + 5);
        rd_s[i] = dval(R, i);
        if (R == root) bc[i] = aval(root, 0, i);
    }
    for (int d = 0; d < P; d++)
        for (int i = 0; i < 3; i++) a2a_s[d * 3 + i] = aval(R, d, i);
    int k = 0;
    req[k++] = MPI_REQUEST_NULL;
    OK(Iallreduce, ar_s, ar_r, N, MPI_INT, MPI_SUM, C, &req[k++]);
    OK(Ibcast, bc, N, MPI_INT, root, C, &req[k++]);
    req[k++] = MPI_REQUEST_NULL;
    OK(Iallgather, ar_s, N, MPI_INT, ag_r, N, MPI_INT, C, &req[k++]);
    OK(Ialltoall, a2a_s, 3, MPI_INT, a2a_r, 3, MPI_INT, C, &req[k++]);
    OK(Ireduce, rd_s, R == mid ? rd_r : NULL, N, MPI_DOUBLE, MPI_MAX, mid, C, &req[k++]);
    OK(Ibarrier, C, &req[k++]);
    OK(Iscan, scan_s, sc_r, N, MPI_INT, MPI_SUM, C, &req[k++]);
    req[k++] = MPI_REQUEST_NULL;
    MPI_Status st[NR];
    int done[NR] = {0}, ndone = 0, flag = 0, idx, out, ids[NR];
    switch (how) {
    case 0: OK(Waitall, NR, req, st); break;
    case 1:
        for (;;) {
            idx = -5;
            if (!OK(Waitany, NR, req, &idx, &st[0])) break;
            if (idx == MPI_UNDEFINED) break;
            CHECK(idx >= 0 && idx < NR && !done[idx], "Waitany index %d", idx);
            if (idx >= 0 && idx < NR) done[idx]++, ndone++;
        }
        CHECK(ndone == 7, "Waitany completed %d requests, 7 active", ndone);
        break;
    case 2:
        for (;;) {
            if (!OK(Testsome, NR, req, &out, ids, st)) break;
            if (out == MPI_UNDEFINED) break;
            for (int j = 0; j < out; j++) {
                CHECK(ids[j] >= 0 && ids[j] < NR && !done[ids[j]], "Testsome index %d", ids[j]);
                if (ids[j] >= 0 && ids[j] < NR) done[ids[j]]++, ndone++;
            }
        }
        CHECK(ndone == 7, "Testsome completed %d requests, 7 active", ndone);
        break;
    default:
        while (!flag)
            if (!OK(Testall, NR, req, &flag, st)) break;
        break;
    }
    for (int j = 0; j < NR; j++) CHECK(req[j] == MPI_REQUEST_NULL, "request %d not freed", j);
    if (how == 1 || how == 2)
        for (int j = 0; j < NR; j++) CHECK(done[j] == (j != 0 && j != 3 && j != 9), "request %d completed %d times", j, done[j]);

    int *e = (int *)malloc((size_t)P * N * sizeof(int));
    for (int i = 0; i < N; i++) {
        long s = 0;
        for (int q = 0; q < P; q++) s += ival(q, i);
        e[i] = (int)s;
    }
    CHECK_I(ar_r, e, N, "outstanding Iallreduce on %s", CN);
    for (int i = 0; i < N; i++) e[i] = aval(root, 0, i);
    CHECK_I(bc, e, N, "outstanding Ibcast on %s", CN);
    for (int q = 0; q < P; q++)
        for (int i = 0; i < N; i++) e[q * N + i] = ival(q, i);
    CHECK_I(ag_r, e, (long)P * N, "outstanding Iallgather on %s", CN);
    for (int q = 0; q < P; q++)
        for (int i = 0; i < 3; i++) e[q * 3 + i] = aval(q, R, i);
    CHECK_I(a2a_r, e, (long)P * 3, "outstanding Ialltoall on %s", CN);
    for (int i = 0; i < N; i++) {
        long s = 0;
        for (int q = 0; q <= R; q++) s += ival(q, i + 5);
        e[i] = (int)s;
    }
    CHECK_I(sc_r, e, N, "outstanding Iscan on %s", CN);
    if (R == mid) {
        double *ed = (double *)malloc(N * sizeof(double));
        for (int i = 0; i < N; i++) {
            ed[i] = dval(0, i);
            for (int q = 1; q < P; q++) ed[i] = dval(q, i) > ed[i] ? dval(q, i) : ed[i];
        }
        CHECK_D(rd_r, ed, N, "outstanding Ireduce max on %s", CN);
        free(ed);
    } else {
        CHECK_POISON(rd_r, N * sizeof(double), "Ireduce wrote the receive buffer of a non-root");
    }
    free(e);
    tu_free(ar_s), tu_free(ar_r), tu_free(bc), tu_free(ag_r), tu_free(a2a_s), tu_free(a2a_r);
    tu_free(rd_s), tu_free(rd_r), tu_free(sc_r), tu_free(scan_s);
}

/* The last rank joins late: before it does, no other rank's request can be complete. The
 * others tell it (zero-byte messages) when they have tested. */
static void t_not_before_late_rank(void)
{
    if (P < 2) return;
    int late = P - 1, tag = 4242;
    MPI_Request rb = MPI_REQUEST_NULL, rc = MPI_REQUEST_NULL;
    int v[4] = {-1, -1, -1, -1}, flag = -1, idx = -5;
    MPI_Status st;
    if (R == late) {
        for (int q = 0; q < P - 1; q++) OK(Recv, NULL, 0, MPI_INT, q, tag, C, &st);
        for (int i = 0; i < 4; i++) v[i] = aval(late, 0, i);
        OK(Ibcast, v, 4, MPI_INT, late, C, &rc);
        OK(Ibarrier, C, &rb);
    } else {
        OK(Ibcast, v, 4, MPI_INT, late, C, &rc);
        OK(Ibarrier, C, &rb);
        tu_sleep_ms(5);
        OK(Test, &rb, &flag, &st);
        CHECK(flag == 0, "Ibarrier complete before rank %d entered it", late);
        CHECK(rb != MPI_REQUEST_NULL);
        flag = -1;
        OK(Test, &rc, &flag, &st);
        CHECK(flag == 0, "Ibcast complete before its root %d started it", late);
        MPI_Request two[2] = {rc, rb};
        OK(Testany, 2, two, &idx, &flag, &st);
        CHECK(flag == 0 && idx == MPI_UNDEFINED, "Testany: flag %d index %d while nothing can complete", flag, idx);
        CHECK(two[0] == rc && two[1] == rb, "Testany changed requests that did not complete");
        OK(Send, NULL, 0, MPI_INT, late, tag, C);
    }
    MPI_Request both[2] = {rc, rb};
    MPI_Status sts[2];
    OK(Waitall, 2, both, sts);
    int e[4];
    for (int i = 0; i < 4; i++) e[i] = aval(late, 0, i);
    CHECK_I(v, e, 4, "late Ibcast on %s", CN);
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    types_create();
    rcases_init();
    mtypes_init();
    run_all(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    for (int how = 0; how < 4; how++) t_outstanding(how);
    t_not_before_late_rank();

    MPI_Comm rev;
    if (OK(Comm_split, MPI_COMM_WORLD, 0, tu.size - 1 - tu.rank, &rev)) {
        run_all(rev, "reversed MPI_COMM_WORLD");
        t_outstanding(2);
        t_not_before_late_rank();
        MPI_Comm_free(&rev);
    }
    set_comm(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    types_free();
    return tu_finalize();
}
