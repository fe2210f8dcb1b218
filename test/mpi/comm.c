/* Communicator creation with ncclmpi in the process: MPI_Comm_dup Comm_dup_with_info
 * Comm_split Comm_split_type Comm_create (the wrappers hook each new communicator).
 *
 * For every communicator made, the membership and rank order are computed here from the
 * arguments (colors, keys, groups) and checked three ways: MPI_Comm_size/rank and group
 * translation, an Allgather of world ranks, and collectives and a ring exchange whose
 * results depend on who is in it. Also: MPI_UNDEFINED colors and empty groups give
 * MPI_COMM_NULL, duplicates are congruent, keep the error handler and copy attributes,
 * and traffic on a duplicate does not mix with its parent's. Nested: a split of a
 * duplicate, a duplicate of a split, a create on a split.
 */
#include "common.h"

static int R, P;
static const MPI_Comm W = MPI_COMM_WORLD;

/* Check comm c against `members` (world ranks in rank order of c, n of them; n == 0: c must
 * be MPI_COMM_NULL on this rank). */
static void exercise(MPI_Comm c, const int *members, int n, const char *what)
{
    int me = -1;
    for (int i = 0; i < n; i++)
        if (members[i] == R) me = i;
    if (me < 0) {
        CHECK(c == MPI_COMM_NULL, "%s: rank %d is not a member but got a communicator", what, R);
        return;
    }
    CHECK(c != MPI_COMM_NULL, "%s: rank %d is a member but got MPI_COMM_NULL", what, R);
    if (c == MPI_COMM_NULL) return;
    int size = -1, rank = -1;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &rank);
    CHECK(size == n && rank == me, "%s: size %d rank %d, expected %d %d", what, size, rank, n, me);
    if (size != n || rank != me) return;
    /* group translation to the world */
    MPI_Group gc, gw;
    MPI_Comm_group(c, &gc);
    MPI_Comm_group(W, &gw);
    int *idx = (int *)malloc(n * sizeof(int)), *wr = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) idx[i] = i;
    MPI_Group_translate_ranks(gc, n, idx, gw, wr);
    CHECK_I(wr, members, n, "%s: group translated to MPI_COMM_WORLD", what);
    MPI_Group_free(&gc);
    MPI_Group_free(&gw);
    /* who is where, as the communicator itself says */
    int *all = (int *)tu_alloc(n * sizeof(int));
    OK(Allgather, &R, 1, MPI_INT, all, 1, MPI_INT, c);
    CHECK_I(all, members, n, "%s: Allgather of world ranks", what);
    /* a sum only the members make */
    enum { L = 5 };
    int v[L], s[L], e[L];
    for (int i = 0; i < L; i++) {
        v[i] = ival(R, i);
        long t = 0;
        for (int q = 0; q < n; q++) t += ival(members[q], i);
        e[i] = (int)t;
    }
    OK(Allreduce, v, s, L, MPI_INT, MPI_SUM, c);
    CHECK_I(s, e, L, "%s: Allreduce", what);
    /* a broadcast from the last rank */
    int b[L];
    for (int i = 0; i < L; i++) b[i] = me == n - 1 ? aval(R, 0, i) : -1, e[i] = aval(members[n - 1], 0, i);
    OK(Bcast, b, L, MPI_INT, n - 1, c);
    CHECK_I(b, e, L, "%s: Bcast from rank %d", what, n - 1);
    /* a ring */
    int nx = (me + 1) % n, pv = (me + n - 1) % n, sv[L], rv[L];
    for (int i = 0; i < L; i++) sv[i] = aval(R, 1, i), e[i] = aval(members[pv], 1, i);
    MPI_Status st;
    OK(Sendrecv, sv, L, MPI_INT, nx, 11, rv, L, MPI_INT, pv, 11, c, &st);
    CHECK_I(rv, e, L, "%s: ring Sendrecv", what);
    CHECK_STATUS(st, pv, 11, MPI_INT, L);
    OK(Barrier, c);
    tu_free(all);
    free(idx), free(wr);
}

/* members of split(color_of, key_of) containing this rank, sorted by (key, world rank) */
static int split_members(const int *color, const int *key, int *out)
{
    int n = 0, mine = color[R];
    if (mine == MPI_UNDEFINED) return 0;
    for (int q = 0; q < P; q++)
        if (color[q] == mine) out[n++] = q;
    for (int i = 1; i < n; i++) /* insertion sort, stable on world rank */
        for (int j = i; j > 0 && key[out[j - 1]] > key[out[j]]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static int copy_calls;
static int copy_fn(MPI_Comm old, int kv, void *extra, void *in, void *out, int *flag)
{
    (void)old, (void)kv, (void)extra;
    copy_calls++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static void t_dup(void)
{
    int *all = (int *)malloc(P * sizeof(int));
    for (int q = 0; q < P; q++) all[q] = q;
    int kv_copy, kv_nocopy, flag = -1, cmp = -1;
    static char anchor[4];
    MPI_Comm_create_keyval(copy_fn, MPI_COMM_NULL_DELETE_FN, &kv_copy, NULL);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &kv_nocopy, NULL);
    MPI_Comm_set_attr(W, kv_copy, anchor);
    MPI_Comm_set_attr(W, kv_nocopy, anchor);

    MPI_Comm d = MPI_COMM_NULL, di = MPI_COMM_NULL, dn = MPI_COMM_NULL;
    copy_calls = 0;
    OK(Comm_dup, W, &d);
    CHECK(copy_calls == 1, "attribute copy callback ran %d times", copy_calls);
    MPI_Comm_compare(W, d, &cmp);
    CHECK(cmp == MPI_CONGRUENT, "Comm_compare(world, dup) = %d", cmp);
    void *val = NULL;
    MPI_Comm_get_attr(d, kv_copy, &val, &flag);
    CHECK(flag && val == anchor + 1, "copied attribute: flag %d", flag);
    MPI_Comm_get_attr(d, kv_nocopy, &val, &flag);
    CHECK(!flag, "attribute with MPI_COMM_NULL_COPY_FN was copied");
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(d, &eh);
    CHECK(eh == MPI_ERRORS_RETURN, "Comm_dup did not keep MPI_ERRORS_RETURN");
    MPI_Errhandler_free(&eh);
    exercise(d, all, P, "Comm_dup(MPI_COMM_WORLD)");

    /* the same envelope on parent and duplicate: each receive gets its own communicator's */
    int next = (R + 1) % P, prev = (R + P - 1) % P, a = aval(R, 2, 0), b = aval(R, 3, 0), ra = -1, rb = -1;
    MPI_Request rq[2];
    OK(Isend, &a, 1, MPI_INT, next, 5, W, &rq[0]);
    OK(Isend, &b, 1, MPI_INT, next, 5, d, &rq[1]);
    OK(Recv, &rb, 1, MPI_INT, prev, 5, d, MPI_STATUS_IGNORE);
    OK(Recv, &ra, 1, MPI_INT, prev, 5, W, MPI_STATUS_IGNORE);
    CHECK(ra == aval(prev, 2, 0) && rb == aval(prev, 3, 0), "messages crossed communicators: %d %d", ra, rb);
    OK(Waitall, 2, rq, MPI_STATUSES_IGNORE);

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "ncclmpi_test_key", "42");
    copy_calls = 0;
    OK(Comm_dup_with_info, d, info, &di);
    CHECK(copy_calls == 1, "attribute copy callback ran %d times in Comm_dup_with_info", copy_calls);
    MPI_Comm_get_attr(di, kv_copy, &val, &flag);
    CHECK(flag && val == anchor + 2, "attribute copied from a copy: flag %d", flag);
    MPI_Comm_compare(d, di, &cmp);
    CHECK(cmp == MPI_CONGRUENT, "Comm_compare(dup, dup_with_info) = %d", cmp);
    exercise(di, all, P, "Comm_dup_with_info(dup)");
    OK(Comm_dup_with_info, W, MPI_INFO_NULL, &dn);
    exercise(dn, all, P, "Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL)");
    MPI_Info_free(&info);

    MPI_Comm_free(&di);
    MPI_Comm_free(&dn);
    MPI_Comm_free(&d);
    MPI_Comm_delete_attr(W, kv_copy);
    MPI_Comm_delete_attr(W, kv_nocopy);
    MPI_Comm_free_keyval(&kv_copy);
    MPI_Comm_free_keyval(&kv_nocopy);
    free(all);
}

static void t_split(void)
{
    int *color = (int *)malloc(P * sizeof(int)), *key = (int *)malloc(P * sizeof(int));
    int *mem = (int *)malloc(P * sizeof(int)), *mem2 = (int *)malloc(P * sizeof(int));
    MPI_Comm c = MPI_COMM_NULL, c2 = MPI_COMM_NULL, dd = MPI_COMM_NULL;
    /* even/odd, reversed */
    for (int q = 0; q < P; q++) color[q] = q % 2, key[q] = -q;
    OK(Comm_split, W, color[R], key[R], &c);
    int n = split_members(color, key, mem), n2 = 0;
    exercise(c, mem, n, "Comm_split(rank mod 2, -rank)");

    /* one color, keys reversing the world */
    MPI_Comm rc = MPI_COMM_NULL;
    for (int q = 0; q < P; q++) color[q] = 3, key[q] = P - q;
    OK(Comm_split, W, 3, P - R, &rc);
    n2 = split_members(color, key, mem2);
    exercise(rc, mem2, n2, "Comm_split(one color, reversed)");
    MPI_Comm_free(&rc);

    /* a split of the even/odd split: thirds by position, equal keys (order of the parent) */
    int pr = -1;
    MPI_Comm_rank(c, &pr);
    int *pc = (int *)malloc(n * sizeof(int)), *pk = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) pc[i] = i % 3 == 2 ? MPI_UNDEFINED : i % 3, pk[i] = 0;
    OK(Comm_split, c, pc[pr], 0, &c2);
    n2 = 0;
    if (pc[pr] != MPI_UNDEFINED)
        for (int i = 0; i < n; i++)
            if (pc[i] == pc[pr]) mem2[n2++] = mem[i];
    exercise(c2, mem2, n2, "Comm_split of a split, MPI_UNDEFINED for some");
    if (c2 != MPI_COMM_NULL) MPI_Comm_free(&c2);
    free(pc), free(pk);

    /* a duplicate of the split */
    OK(Comm_dup, c, &dd);
    exercise(dd, mem, n, "Comm_dup of a split");
    MPI_Comm_free(&dd);
    MPI_Comm_free(&c);

    /* rank 0 out, the rest in one communicator in world order */
    for (int q = 0; q < P; q++) color[q] = q == 0 ? MPI_UNDEFINED : 7, key[q] = 0;
    OK(Comm_split, W, color[R], key[R], &c);
    n = split_members(color, key, mem);
    exercise(c, mem, n, "Comm_split without rank 0");
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);

    /* everyone alone */
    OK(Comm_split, W, R, 0, &c);
    exercise(c, &R, 1, "Comm_split(rank)");
    MPI_Comm_free(&c);
    free(color), free(key), free(mem), free(mem2);
}

static void t_split_type(void)
{
    int *mem = (int *)malloc(P * sizeof(int));
    MPI_Comm c = MPI_COMM_NULL, d = MPI_COMM_NULL;
    /* one node: everyone, in reverse order */
    for (int q = 0; q < P; q++) mem[q] = P - 1 - q;
    OK(Comm_split_type, W, MPI_COMM_TYPE_SHARED, P - 1 - R, MPI_INFO_NULL, &c);
    exercise(c, mem, P, "Comm_split_type(SHARED, reversed)");
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "ncclmpi_test_key", "1");
    /* odd ranks opt out */
    OK(Comm_split_type, c, R % 2 ? MPI_UNDEFINED : MPI_COMM_TYPE_SHARED, R, info, &d);
    int n = 0;
    for (int q = 0; q < P; q += 2) mem[n++] = q;
    exercise(d, mem, n, "Comm_split_type(MPI_UNDEFINED on odd ranks)");
    MPI_Info_free(&info);
    if (d != MPI_COMM_NULL) MPI_Comm_free(&d);
    MPI_Comm_free(&c);
    free(mem);
}

static void t_create(void)
{
    MPI_Group gw, g;
    MPI_Comm c = MPI_COMM_NULL, c2 = MPI_COMM_NULL;
    int *ranks = (int *)malloc(P * sizeof(int)), n = 0, cmp = -1;
    MPI_Comm_group(W, &gw);
    /* the whole group: congruent to the world */
    OK(Comm_create, W, gw, &c);
    MPI_Comm_compare(W, c, &cmp);
    CHECK(cmp == MPI_CONGRUENT, "Comm_create(world group) compares %d", cmp);
    for (int q = 0; q < P; q++) ranks[q] = q;
    exercise(c, ranks, P, "Comm_create(world group)");
    MPI_Comm_free(&c);
    /* reversed, without rank 0 */
    for (int q = P - 1; q >= 1; q--) ranks[n++] = q;
    MPI_Group_incl(gw, n, ranks, &g);
    OK(Comm_create, W, g, &c);
    exercise(c, ranks, n, "Comm_create(reversed, without rank 0)");
    MPI_Group_free(&g);
    /* on that one: its first two ranks */
    if (c != MPI_COMM_NULL) {
        MPI_Group gc, g2;
        MPI_Comm_group(c, &gc);
        int two = n < 2 ? n : 2, pos[2] = {0, 1};
        MPI_Group_incl(gc, two, pos, &g2);
        OK(Comm_create, c, g2, &c2);
        exercise(c2, ranks, two, "Comm_create on a created communicator");
        if (c2 != MPI_COMM_NULL) MPI_Comm_free(&c2);
        MPI_Group_free(&g2);
        MPI_Group_free(&gc);
        MPI_Comm_free(&c);
    }
    /* the empty group */
    OK(Comm_create, W, MPI_GROUP_EMPTY, &c);
    CHECK(c == MPI_COMM_NULL, "Comm_create(MPI_GROUP_EMPTY) gave a communicator");
    MPI_Group_free(&gw);
    free(ranks);
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, MPI_THREAD_MULTIPLE);
    R = tu.rank;
    P = tu.size;
    t_dup();
    t_split();
    t_split_type();
    t_create();
    /* many communicators: creation and freeing stay correct */
    for (int i = 0; i < 40; i++) {
        MPI_Comm c;
        if (!OK(Comm_dup, W, &c)) break;
        int v = i + R, s = -1;
        OK(Allreduce, &v, &s, 1, MPI_INT, MPI_SUM, c);
        CHECK(s == i * P + P * (P - 1) / 2, "Allreduce on duplicate %d: %d", i, s);
        MPI_Comm_free(&c);
    }
    return tu_finalize();
}
