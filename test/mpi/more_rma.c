/* One-sided communication with ncclmpi in the process, on host memory: MPI_Win_create /
 * Win_allocate / Win_allocate_shared / Win_create_dynamic + Win_attach, every data call (Put Get
 * Accumulate Get_accumulate Fetch_and_op Compare_and_swap Rput Rget Raccumulate Rget_accumulate)
 * and every synchronization (Win_fence; Win_post/start/complete/wait/test; Win_lock/unlock,
 * lock_all/unlock_all, the four flushes, Win_sync; Win_free).
 *
 * Each rank works on the window of its ring neighbour (rank+1) or of rank 0, and every value is
 * checked against what MPI's semantics give: puts and gets land where they were sent, an
 * accumulation is the sum of every rank's contribution, fetch-and-op hands out each old value
 * exactly once, compare-and-swap lets exactly one rank win. A rank reads its own window memory
 * only inside an epoch on itself.
 */
#include "common.h"

static int R, P, next, prev;
static const MPI_Comm W = MPI_COMM_WORLD;

/* Read n ints of rank `who`'s window at disp into out (a passive-target epoch of its own). */
static void win_read(MPI_Win win, int who, MPI_Aint disp, int n, int *out)
{
    tu_poison(out, n * sizeof(int));
    OK(Win_lock, MPI_LOCK_SHARED, who, 0, win);
    OK(Get, out, n, MPI_INT, who, disp, n, MPI_INT, win);
    OK(Win_unlock, who, win);
}

/* ---- active target: fences ------------------------------------------------------------- */
static void t_fence(void)
{
    enum { N = 8 };
    int *base = (int *)tu_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) base[i] = ival(R, i);
    MPI_Win win;
    if (!OK(Win_create, base, N * sizeof(int), sizeof(int), MPI_INFO_NULL, W, &win)) return;
    void *abase = NULL;
    MPI_Aint *asize = NULL;
    int aflag = 0;
    if (OK(Win_get_attr, win, MPI_WIN_BASE, &abase, &aflag)) CHECK(aflag && abase == base, "MPI_WIN_BASE of the window");
    if (OK(Win_get_attr, win, MPI_WIN_SIZE, &asize, &aflag))
        CHECK(aflag && asize && *asize == (MPI_Aint)(N * sizeof(int)), "MPI_WIN_SIZE of the window");
    OK(Win_fence, MPI_MODE_NOPRECEDE, win);
    int put[4], got[4], e[N];
    for (int i = 0; i < 4; i++) put[i] = aval(R, 0, i);
    OK(Put, put, 4, MPI_INT, next, 0, 4, MPI_INT, win);
    OK(Win_fence, 0, win);
    for (int i = 0; i < N; i++) e[i] = i < 4 ? aval(prev, 0, i) : ival(R, i);
    CHECK_I(base, e, N, "window after Put from rank %d", prev);
    CHECK_GUARD(base);
    tu_poison(got, sizeof(got));
    OK(Get, got, 4, MPI_INT, next, 4, 4, MPI_INT, win);
    OK(Win_fence, 0, win);
    for (int i = 0; i < 4; i++) e[i] = ival(next, 4 + i);
    CHECK_I(got, e, 4, "Get from rank %d", next);
    /* every rank adds rank+1 to element 4 of rank 0, and a strided pair into elements 5 and 7 */
    int one = R + 1, two[3] = {R, -7, 2 * R};
    MPI_Datatype pair;
    MPI_Type_vector(2, 1, 2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    OK(Accumulate, &one, 1, MPI_INT, 0, 4, 1, MPI_INT, MPI_SUM, win);
    OK(Accumulate, two, 1, pair, 0, 5, 1, pair, MPI_SUM, win);
    OK(Win_fence, MPI_MODE_NOSUCCEED, win);
    MPI_Type_free(&pair);
    if (R == 0) {
        long s = 0, s2 = 0;
        for (int r = 0; r < P; r++) s += r + 1, s2 += r;
        CHECK(base[4] == ival(0, 4) + s, "Accumulate SUM: %d", base[4]);
        CHECK(base[5] == ival(0, 5) + s2 && base[6] == ival(0, 6) && base[7] == ival(0, 7) + 2 * s2,
              "Accumulate of a strided type: %d %d %d", base[5], base[6], base[7]);
    }
    OK(Win_free, &win);
    CHECK(win == MPI_WIN_NULL, "Win_free left the handle set");
    tu_free(base);
}

/* ---- active target: post / start / complete / wait (or test) ---------------------------- */
static void t_pscw(void)
{
    enum { N = 4 };
    int *base = (int *)tu_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) base[i] = -1;
    MPI_Win win;
    if (!OK(Win_create, base, N * sizeof(int), sizeof(int), MPI_INFO_NULL, W, &win)) return;
    MPI_Group wg, from, to;
    MPI_Comm_group(W, &wg);
    MPI_Group_incl(wg, 1, &prev, &from); /* prev puts into this rank's window */
    MPI_Group_incl(wg, 1, &next, &to);
    int v[N];
    for (int i = 0; i < N; i++) v[i] = aval(R, 3, i);
    OK(Win_post, from, 0, win);
    OK(Win_start, to, 0, win);
    OK(Put, v, N, MPI_INT, next, 0, N, MPI_INT, win);
    OK(Win_complete, win);
    if (R % 2 == 0) {  /* poll on even ranks, block on odd ones */
        int flag = 0;
        for (long i = 0; !flag && i < 100000000L; i++) {
            if (!OK(Win_test, win, &flag)) break;
        }
        CHECK(flag, "Win_test never completed the exposure epoch");
    } else {
        OK(Win_wait, win);
    }
    int e[N];
    for (int i = 0; i < N; i++) e[i] = aval(prev, 3, i);
    CHECK_I(base, e, N, "post/start Put from rank %d", prev);
    MPI_Group_free(&from);
    MPI_Group_free(&to);
    MPI_Group_free(&wg);
    OK(Win_free, &win);
    tu_free(base);
}

/* ---- passive target: atomics and request-based calls on an allocated window --------------- */
enum { W_CNT, W_CAS, W_GACC, W_RACC, W_RGACC, W_SLOT0 }; /* element indices of the window */
static void t_passive(void)
{
    const int N = W_SLOT0 + P; /* slots: one per rank, written by Rput */
    int *base = NULL;
    MPI_Win win;
    if (!OK(Win_allocate, N * sizeof(int), sizeof(int), MPI_INFO_NULL, W, &base, &win)) return;
    OK(Win_lock, MPI_LOCK_EXCLUSIVE, R, 0, win); /* initialise the own window in an epoch */
    for (int i = 0; i < N; i++) base[i] = i == W_CAS ? -1 : i < W_SLOT0 ? 0 : ival(R, i);
    OK(Win_unlock, R, win);
    OK(Barrier, W);

    /* fetch-and-op: each rank takes a ticket from rank 0's counter */
    int old = -1, one = 1;
    OK(Win_lock, MPI_LOCK_EXCLUSIVE, 0, 0, win);
    OK(Fetch_and_op, &one, &old, MPI_INT, 0, W_CNT, MPI_SUM, win);
    OK(Win_unlock, 0, win);
    /* compare-and-swap: the first rank to swap -1 for its rank wins */
    int mine = R, cmp = -1, seen = -2;
    OK(Win_lock, MPI_LOCK_EXCLUSIVE, 0, 0, win);
    OK(Compare_and_swap, &mine, &cmp, &seen, MPI_INT, 0, W_CAS, win);
    OK(Win_unlock, 0, win);
    /* get-accumulate: add rank+1, see the sum of those before */
    int add = R + 1, before = -1;
    OK(Win_lock, MPI_LOCK_EXCLUSIVE, 0, 0, win);
    OK(Get_accumulate, &add, 1, MPI_INT, &before, 1, MPI_INT, 0, W_GACC, 1, MPI_INT, MPI_SUM, win);
    OK(Win_unlock, 0, win);
    OK(Barrier, W);

    /* request-based calls in one lock_all epoch, completed by waits and every kind of flush */
    int rv[2] = {aval(R, 5, 0), aval(R, 5, 1)}, rg = -1, racc = 2 * R + 1, rgacc = R + 3, rgold = -1;
    MPI_Request q[4];
    OK(Win_lock_all, 0, win);
    OK(Rput, rv, 1, MPI_INT, next, W_SLOT0 + R, 1, MPI_INT, win, &q[0]);
    OK(Raccumulate, &racc, 1, MPI_INT, 0, W_RACC, 1, MPI_INT, MPI_SUM, win, &q[1]);
    OK(Rget_accumulate, &rgacc, 1, MPI_INT, &rgold, 1, MPI_INT, 0, W_RGACC, 1, MPI_INT, MPI_SUM, win, &q[2]);
    OK(Wait, &q[0], MPI_STATUS_IGNORE);
    OK(Wait, &q[1], MPI_STATUS_IGNORE);
    OK(Wait, &q[2], MPI_STATUS_IGNORE);
    OK(Win_flush_local, next, win);
    OK(Win_flush_local_all, win);
    OK(Win_flush, next, win);
    OK(Win_flush_all, win);
    OK(Win_sync, win);
    OK(Win_unlock_all, win);
    OK(Barrier, W);
    /* Rget reads back, from rank next, the slot this rank's Rput wrote */
    OK(Win_lock_all, 0, win);
    OK(Rget, &rg, 1, MPI_INT, next, W_SLOT0 + R, 1, MPI_INT, win, &q[3]);
    OK(Wait, &q[3], MPI_STATUS_IGNORE);
    OK(Win_unlock_all, win);
    CHECK(rg == rv[0], "Rget of the own Rput into rank %d: %d, expected %d", next, rg, rv[0]);

    /* gather what every rank saw; rank 0 reads its window at the end */
    int my[4] = {old, seen, before, rgold}, *all = (int *)malloc(4 * P * sizeof(int));
    OK(Allgather, my, 4, MPI_INT, all, 4, MPI_INT, W);
    int *tickets = (int *)calloc(P, sizeof(int)), winners = 0, winner = -1;
    for (int r = 0; r < P; r++) {
        int t = all[4 * r];
        CHECK(t >= 0 && t < P && !tickets[t]++, "Fetch_and_op: rank %d got ticket %d twice or out of range", r, t);
        if (all[4 * r + 1] == -1) winners++, winner = r;
    }
    CHECK(winners == 1, "Compare_and_swap: %d ranks saw the initial value", winners);
    for (int r = 0; r < P && winners == 1; r++)
        if (r != winner) CHECK(all[4 * r + 1] == winner, "Compare_and_swap: rank %d saw %d, winner %d", r, all[4 * r + 1], winner);
    /* get-accumulate and Rget_accumulate: each old value is a partial sum of the others' */
    long total = 0, rtotal = 0;
    for (int r = 0; r < P; r++) total += r + 1, rtotal += r + 3;
    for (int r = 0; r < P; r++) {
        CHECK(all[4 * r + 2] >= 0 && all[4 * r + 2] <= total - (r + 1), "Get_accumulate: rank %d saw %d", r, all[4 * r + 2]);
        CHECK(all[4 * r + 3] >= 0 && all[4 * r + 3] <= rtotal - (r + 3), "Rget_accumulate: rank %d saw %d", r, all[4 * r + 3]);
    }
    int fin[W_SLOT0];
    win_read(win, 0, 0, W_SLOT0, fin);
    long racc_total = 0;
    for (int r = 0; r < P; r++) racc_total += 2 * r + 1;
    CHECK(fin[W_CNT] == P && fin[W_CAS] == winner && fin[W_GACC] == total && fin[W_RACC] == racc_total &&
              fin[W_RGACC] == rtotal,
          "rank 0's window: count %d cas %d gacc %d racc %d rgacc %d", fin[W_CNT], fin[W_CAS], fin[W_GACC],
          fin[W_RACC], fin[W_RGACC]);
    /* MPI_NO_OP reads atomically; its origin buffer is not used (NULL here) */
    int cur = -1;
    OK(Win_lock, MPI_LOCK_SHARED, 0, 0, win);
    OK(Fetch_and_op, NULL, &cur, MPI_INT, 0, W_CNT, MPI_NO_OP, win);
    OK(Win_unlock, 0, win);
    CHECK(cur == P, "Fetch_and_op MPI_NO_OP read %d", cur);
    /* the slot prev wrote into this rank's window */
    int slot = -1;
    win_read(win, R, W_SLOT0 + prev, 1, &slot);
    CHECK(slot == aval(prev, 5, 0), "Rput from rank %d: %d", prev, slot);
    free(all);
    free(tickets);
    OK(Win_free, &win);
}

/* ---- shared memory window ------------------------------------------------------------------ */
static void t_shared(void)
{
    MPI_Comm node;
    MPI_Comm_split_type(W, MPI_COMM_TYPE_SHARED, R, MPI_INFO_NULL, &node);
    int nr = -1, ns = -1;
    MPI_Comm_rank(node, &nr);
    MPI_Comm_size(node, &ns);
    int *mem = NULL;
    MPI_Win win;
    if (OK(Win_allocate_shared, 2 * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mem, &win)) {
        OK(Win_lock_all, MPI_MODE_NOCHECK, win);
        mem[0] = aval(R, 6, 0);
        mem[1] = aval(R, 6, 1);
        OK(Win_sync, win);
        OK(Barrier, node);
        OK(Win_sync, win);
        int nb = (nr + 1) % ns, disp = 0;
        MPI_Aint sz = 0;
        int *theirs = NULL;
        MPI_Win_shared_query(win, nb, &sz, &disp, &theirs);
        int nbw = -1; /* the world rank of the node neighbour */
        MPI_Group ng, wg;
        MPI_Comm_group(node, &ng);
        MPI_Comm_group(W, &wg);
        MPI_Group_translate_ranks(ng, 1, &nb, wg, &nbw);
        MPI_Group_free(&ng);
        MPI_Group_free(&wg);
        CHECK(sz == 2 * (MPI_Aint)sizeof(int) && theirs && theirs[0] == aval(nbw, 6, 0) && theirs[1] == aval(nbw, 6, 1),
              "Win_allocate_shared: neighbour's memory size %ld: %d %d", (long)sz, theirs ? theirs[0] : -1,
              theirs ? theirs[1] : -1);
        OK(Win_unlock_all, win);
        OK(Win_free, &win);
    }
    MPI_Comm_free(&node);
}

/* ---- dynamic window ------------------------------------------------------------------------- */
static void t_dynamic(void)
{
    enum { N = 6 };
    MPI_Win win;
    if (!OK(Win_create_dynamic, MPI_INFO_NULL, W, &win)) return;
    int *mem = (int *)tu_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) mem[i] = -i;
    OK(Win_attach, win, mem, N * sizeof(int));
    MPI_Aint mine, *addr = (MPI_Aint *)malloc(P * sizeof(MPI_Aint));
    MPI_Get_address(mem, &mine);
    OK(Allgather, &mine, 1, MPI_AINT, addr, 1, MPI_AINT, W);
    int v[N], got[N], e[N];
    for (int i = 0; i < N; i++) v[i] = aval(R, 7, i);
    OK(Win_fence, 0, win);
    OK(Put, v, 3, MPI_INT, next, addr[next] + 3 * sizeof(int), 3, MPI_INT, win);
    OK(Win_fence, 0, win);
    for (int i = 0; i < N; i++) e[i] = i < 3 ? -i : aval(prev, 7, i - 3);
    CHECK_I(mem, e, N, "dynamic window after Put from rank %d", prev);
    tu_poison(got, sizeof(got));
    OK(Get, got, N, MPI_INT, next, addr[next], N, MPI_INT, win);
    OK(Win_fence, 0, win);
    for (int i = 0; i < N; i++) e[i] = i < 3 ? -i : aval(R, 7, i - 3);
    CHECK_I(got, e, N, "dynamic window Get from rank %d", next);
    MPI_Win_detach(win, mem);
    OK(Win_free, &win);
    free(addr);
    tu_free(mem);
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, &prev);
    t_fence();
    t_pscw();
    t_passive();
    t_shared();
    t_dynamic();
    return tu_finalize();
}
