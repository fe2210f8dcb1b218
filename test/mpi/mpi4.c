/* The MPI-4 calls ncclmpi intercepts where the MPI has them (the |MPI4 rows of
 * src/interpose/mpi_api.def; Open MPI 5.0 has them all, 4.1 none: then this program is not built),
 * on host buffers:
 *   MPI_Isendrecv, MPI_Isendrecv_replace   around the ring, statuses checked
 *   persistent collectives                 every MPI_<coll>_init and MPI_Barrier_init, and the
 *                                          persistent neighbourhood collectives on a periodic ring
 *                                          topology: planned once, started three times with new
 *                                          data (MPI_Start, MPI_Startall), each result compared
 *                                          with PMPI's blocking collective on copies of the inputs
 *   partitioned communication             MPI_Psend_init/MPI_Precv_init around the ring, partitions
 *                                          marked ready by MPI_Pready, _range and _list, polled with
 *                                          MPI_Parrived, two rounds
 *   communicators                          MPI_Comm_idup_with_info; MPI_Comm_create_from_group from
 *                                          a session's mpi://WORLD group
 *   large-count forms (MPI_<Name>_c)       where the MPI has them (NM_BUILD_HAVE_MPI_LARGE): counts
 *                                          that fit an int (the int form's calls, counted as MPI_<Name>:
 *                                          OKC), MPI_Alltoallv_c (counted as itself), a count above
 *                                          INT_MAX of a zero-size datatype (the real MPI's _c call)
 * Outputs are poisoned before every call; the references are PMPI's (never ncclmpi's) results.
 */
#include "common.h"
#include "nm_build.h"
#include <limits.h>

static int R, P, next, prev;
static const MPI_Comm W = MPI_COMM_WORLD;
enum { N = 5, ROUNDS = 3 };

/* ---- Isendrecv, Isendrecv_replace ----------------------------------------------------------- */
static void t_isendrecv(void)
{
    int *s = (int *)tu_alloc(N * sizeof(int)), *r = (int *)tu_alloc(N * sizeof(int)), e[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) s[i] = ival(R, i + round), e[i] = ival(prev, i + round);
        tu_repoison(r);
        MPI_Request q = MPI_REQUEST_NULL;
        MPI_Status st;
        tu_poison_status(&st);
        if (OK(Isendrecv, s, N, MPI_INT, next, 7, r, N, MPI_INT, prev, 7, W, &q) && OK(Wait, &q, &st)) {
            CHECK_I(r, e, N, "Isendrecv round %d", round);
            CHECK_STATUS(st, prev, 7, MPI_INT, N);
        }
        CHECK_GUARD(r);
        for (int i = 0; i < N; i++) r[i] = ival(R, 3 * i + round);
        for (int i = 0; i < N; i++) e[i] = ival(prev, 3 * i + round);
        tu_poison_status(&st);
        if (OK(Isendrecv_replace, r, N, MPI_INT, next, 8, prev, 8, W, &q) && OK(Wait, &q, &st)) {
            CHECK_I(r, e, N, "Isendrecv_replace round %d", round);
            CHECK_STATUS(st, prev, 8, MPI_INT, N);
        }
        CHECK_GUARD(r);
    }
    tu_free(s);
    tu_free(r);
}

/* ---- persistent collectives ----------------------------------------------------------------- */
/* Case k's call on (s, r) over c: its persistent form (pers: MPI_<coll>_init into *q, through the
 * harness) or PMPI's blocking form (the reference). Counts: N per rank, or cnt[] (1 to 3 by rank);
 * roots: P-1 (reduce, bcast) and 0 (gather, scatter). Returns 1 when the call succeeded. */
enum { K_BARRIER = 16, K_NEIGH = 17, K_COUNT = 22 };
static const char *const kname[K_COUNT] = {
    "Allreduce", "Reduce", "Bcast", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Alltoallw",
    "Reduce_scatter", "Reduce_scatter_block", "Gather", "Gatherv", "Scatter", "Scatterv", "Scan", "Exscan",
    "Barrier", "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
    "Neighbor_alltoallw"};
static int cnt[64], dsp[64], acnt[64], adsp[64], wcnt[64], wdsp[64];
static MPI_Aint wadsp[64];
static MPI_Datatype wt[64];

/* COLL(B, I, args): the persistent form MPI_I(args, info, q) through the harness, or PMPI_B(args) */
#define COLL(B, I, ...) (pers ? OK(I, __VA_ARGS__, info, q) : PMPI_##B(__VA_ARGS__) == MPI_SUCCESS)
static int pcoll(int k, int pers, int *s, int *r, MPI_Comm c, MPI_Info info, MPI_Request *q)
{
    const MPI_Datatype I = MPI_INT;
    switch (k) {
    case 0: return COLL(Allreduce, Allreduce_init, s, r, N, I, MPI_SUM, c);
    case 1: return COLL(Reduce, Reduce_init, s, r, N, I, MPI_SUM, P - 1, c);
    case 2: return COLL(Bcast, Bcast_init, r, N, I, P - 1, c);
    case 3: return COLL(Allgather, Allgather_init, s, N, I, r, N, I, c);
    case 4: return COLL(Allgatherv, Allgatherv_init, s, cnt[R], I, r, cnt, dsp, I, c);
    case 5: return COLL(Alltoall, Alltoall_init, s, N, I, r, N, I, c);
    case 6: return COLL(Alltoallv, Alltoallv_init, s, acnt, adsp, I, r, acnt, adsp, I, c);
    case 7: return COLL(Alltoallw, Alltoallw_init, s, wcnt, wdsp, wt, r, wcnt, wdsp, wt, c);
    case 8: return COLL(Reduce_scatter, Reduce_scatter_init, s, r, cnt, I, MPI_SUM, c);
    case 9: return COLL(Reduce_scatter_block, Reduce_scatter_block_init, s, r, N, I, MPI_SUM, c);
    case 10: return COLL(Gather, Gather_init, s, N, I, r, N, I, 0, c);
    case 11: return COLL(Gatherv, Gatherv_init, s, cnt[R], I, r, cnt, dsp, I, 0, c);
    case 12: return COLL(Scatter, Scatter_init, s, N, I, r, N, I, 0, c);
    case 13: return COLL(Scatterv, Scatterv_init, s, cnt, dsp, I, r, cnt[R], I, 0, c);
    case 14: return COLL(Scan, Scan_init, s, r, N, I, MPI_SUM, c);
    case 15: return COLL(Exscan, Exscan_init, s, r, N, I, MPI_SUM, c);
    case 16: return COLL(Barrier, Barrier_init, c);
    /* on the ring topology: two neighbours */
    case 17: return COLL(Neighbor_allgather, Neighbor_allgather_init, s, N, I, r, N, I, c);
    case 18: return COLL(Neighbor_allgatherv, Neighbor_allgatherv_init, s, N, I, r, wcnt, wdsp, I, c);
    case 19: return COLL(Neighbor_alltoall, Neighbor_alltoall_init, s, N, I, r, N, I, c);
    case 20: return COLL(Neighbor_alltoallv, Neighbor_alltoallv_init, s, wcnt, wdsp, I, r, wcnt, wdsp, I, c);
    case 21: return COLL(Neighbor_alltoallw, Neighbor_alltoallw_init, s, wcnt, wadsp, wt, r, wcnt, wadsp, wt, c);
    }
    return 0;
}
#undef COLL

static void t_persistent_colls(void)
{
    MPI_Comm ring;
    int dims[1] = {P}, periods[1] = {1};
    MPI_Cart_create(W, 1, dims, periods, 0, &ring); /* (intercepted: a test of more_calls) */
    for (int i = 0, d = 0; i < P; i++) {
        cnt[i] = i % 3 + 1, dsp[i] = d, d += cnt[i];
        acnt[i] = (R + i) % 3 + 1, adsp[i] = i * N; /* (rank i sends rank R as many as R sends i) */
    }
    for (int i = 0; i < (P < 2 ? 2 : P); i++) /* (per rank, or per ring neighbour: two) */
        wcnt[i] = N, wadsp[i] = i * N * (MPI_Aint)sizeof(int), wt[i] = MPI_INT;
    const int M = P < 2 ? 2 : P; /* blocks: one per rank, or per neighbour (two on the ring) */
    const size_t bytes = (size_t)M * N * sizeof(int);
    int *s = (int *)tu_alloc(bytes), *r = (int *)tu_alloc(bytes), *rs = (int *)tu_alloc(bytes);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "ncclmpi_test", "persistent");
    for (int k = 0; k < K_COUNT; k++) {
        const MPI_Comm c = k >= K_NEIGH ? ring : W;
        /* (displacements: the neighbourhood v forms' in elements, Alltoallw's in bytes) */
        for (int i = 0; i < P; i++) wdsp[i] = k == 18 || k == 20 ? i * N : i * N * (int)sizeof(int);
        MPI_Request q = MPI_REQUEST_NULL;
        for (int i = 0; i < M * N; i++) s[i] = ival(R, i);
        tu_repoison(r);
        if (!pcoll(k, 1, s, r, c, info, &q)) continue;
        for (int round = 0; round < ROUNDS; round++) {
            for (int i = 0; i < M * N; i++) s[i] = ival(R, 31 * round + i);
            tu_repoison(r);
            tu_repoison(rs);
            if (k == 2 && R == P - 1) /* the broadcast's root: its buffer is the input */
                for (int i = 0; i < N; i++) r[i] = rs[i] = ival(R, 7 * round + i);
            const int ok = round == 1 ? OK(Startall, 1, &q) : OK(Start, &q);
            if (!ok || !OK(Wait, &q, MPI_STATUS_IGNORE)) break;
            CHECK(q != MPI_REQUEST_NULL, "MPI_%s_init: the request is still there after its Wait", kname[k]);
            CHECK(pcoll(k, 0, s, rs, c, info, NULL), "PMPI_%s failed", kname[k]);
            /* (with one or two ranks both ring neighbours are the same process, and which of its
             * two blocks lands where is the implementation's choice: its persistent and blocking
             * alltoalls choose differently; the blocks may come swapped there) */
            if (k >= 19 && P <= 2 && !memcmp(r, rs + N, N * sizeof(int)) && !memcmp(r + N, rs, N * sizeof(int)))
                memcpy(r, rs, 2 * N * sizeof(int));
            if (k != 15 || R > 0) /* (MPI_Exscan leaves rank 0's output undefined) */
                CHECK_I(r, rs, M * N, "MPI_%s_init round %d against PMPI_%s", kname[k], round, kname[k]);
            CHECK_GUARD(r);
        }
        if (q != MPI_REQUEST_NULL) OK(Request_free, &q);
    }
    MPI_Info_free(&info);
    MPI_Comm_free(&ring);
    tu_free(s);
    tu_free(r);
    tu_free(rs);
}

/* ---- partitioned communication -------------------------------------------------------------- */
static void t_partitioned(void)
{
    enum { PARTS = 4 };
    int *s = (int *)tu_alloc(PARTS * N * sizeof(int)), *r = (int *)tu_alloc(PARTS * N * sizeof(int));
    int e[PARTS * N];
    MPI_Request q[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (!OK(Psend_init, s, PARTS, (MPI_Count)N, MPI_INT, next, 9, W, MPI_INFO_NULL, &q[0]) ||
        !OK(Precv_init, r, PARTS, (MPI_Count)N, MPI_INT, prev, 9, W, MPI_INFO_NULL, &q[1]))
        return;
    for (int round = 0; round < 2; round++) {
        tu_repoison(r);
        if (!OK(Startall, 2, q)) break;
        for (int i = 0; i < PARTS * N; i++) s[i] = ival(R, 11 * round + i), e[i] = ival(prev, 11 * round + i);
        int list[1] = {3};
        OK(Pready, 0, q[0]);
        OK(Pready_range, 1, 2, q[0]);
        OK(Pready_list, 1, list, q[0]);
        for (int p = 0; p < PARTS; p++) {
            int flag = 0;
            for (long spins = 0; !flag && spins < 100000000L; spins++)
                if (!OK(Parrived, q[1], p, &flag)) break;
            CHECK(flag, "partition %d never arrived", p);
        }
        if (!OK(Waitall, 2, q, MPI_STATUSES_IGNORE)) break;
        CHECK_I(r, e, PARTS * N, "partitioned round %d", round);
        CHECK_GUARD(r);
    }
    for (int i = 0; i < 2; i++)
        if (q[i] != MPI_REQUEST_NULL) OK(Request_free, &q[i]);
    tu_free(s);
    tu_free(r);
}

/* ---- communicators -------------------------------------------------------------------------- */
static void t_comms(void)
{
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Comm d = MPI_COMM_NULL;
    MPI_Request q = MPI_REQUEST_NULL;
    if (OK(Comm_idup_with_info, W, info, &d, &q) && OK(Wait, &q, MPI_STATUS_IGNORE)) {
        int cmp = -1, x = ival(R, 1), sum = 0, e = 0;
        MPI_Comm_compare(W, d, &cmp);
        CHECK(cmp == MPI_CONGRUENT, "Comm_idup_with_info: compare %d", cmp);
        PMPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, d);
        for (int i = 0; i < P; i++) e += ival(i, 1);
        CHECK(sum == e, "an allreduce on the duplicate: %d, expected %d", sum, e);
        MPI_Comm_free(&d);
    }
    MPI_Info_free(&info);
    MPI_Session session;
    MPI_Group g;
    MPI_Comm c = MPI_COMM_NULL;
    if (MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session) != MPI_SUCCESS) {
        CHECK(0, "MPI_Session_init failed");
        return;
    }
    if (MPI_Group_from_session_pset(session, "mpi://WORLD", &g) == MPI_SUCCESS) {
        if (OK(Comm_create_from_group, g, "ncclmpi.test.mpi4", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c)) {
            int n = -1, x = R + 1, sum = 0;
            MPI_Comm_size(c, &n);
            CHECK(n == P, "Comm_create_from_group: size %d", n);
            PMPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, c);
            CHECK(sum == P * (P + 1) / 2, "an allreduce on it: %d", sum);
            MPI_Comm_free(&c);
        }
        MPI_Group_free(&g);
    } else {
        CHECK(0, "MPI_Group_from_session_pset(mpi://WORLD) failed");
    }
    MPI_Session_finalize(&session);
}

/* ---- large-count forms ---------------------------------------------------------------------- */
#if NM_BUILD_HAVE_MPI_LARGE
/* MPI_<fn>_c whose counts fit an int: ncclmpi makes it its MPI_<fn> call, counted as that one */
#define OKC(fn, ...) tu_ok(__FILE__, __LINE__, "MPI_" #fn "_c", (tu_note(#fn), MPI_##fn##_c(__VA_ARGS__)))
static void t_large(void)
{
    const int M = 2;
    int *s = (int *)tu_alloc(P * M * sizeof(int)), *r = (int *)tu_alloc(P * M * sizeof(int)), e[256];
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_Status st;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < M; i++) s[i] = ival(R, i + round);
        tu_repoison(r);
        if (OKC(Allreduce, s, r, (MPI_Count)M, MPI_INT, MPI_SUM, W)) {
            PMPI_Allreduce(s, e, M, MPI_INT, MPI_SUM, W);
            CHECK_I(r, e, M, "Allreduce_c round %d", round);
        }
        CHECK_GUARD(r);
        tu_repoison(r);
        if (OKC(Iallreduce, s, r, (MPI_Count)M, MPI_INT, MPI_MAX, W, &q) && OK(Wait, &q, MPI_STATUS_IGNORE)) {
            PMPI_Allreduce(s, e, M, MPI_INT, MPI_MAX, W);
            CHECK_I(r, e, M, "Iallreduce_c round %d", round);
        }
        CHECK_GUARD(r);
        tu_repoison(r);
        if (R == 0)
            for (int i = 0; i < M; i++) r[i] = ival(0, 5 * i + round);
        for (int i = 0; i < M; i++) e[i] = ival(0, 5 * i + round);
        if (OKC(Bcast, r, (MPI_Count)M, MPI_INT, 0, W)) CHECK_I(r, e, M, "Bcast_c round %d", round);
        CHECK_GUARD(r);
        tu_repoison(r);
        if (OKC(Allgather, s, (MPI_Count)M, MPI_INT, r, (MPI_Count)M, MPI_INT, W)) {
            PMPI_Allgather(s, M, MPI_INT, e, M, MPI_INT, W);
            CHECK_I(r, e, P * M, "Allgather_c round %d", round);
        }
        CHECK_GUARD(r);
        /* around the ring: MPI_Isend_c + MPI_Recv_c, MPI_Irecv_c + MPI_Send_c */
        for (int i = 0; i < M; i++) e[i] = ival(prev, i + round);
        tu_repoison(r);
        tu_poison_status(&st);
        if (OKC(Isend, s, (MPI_Count)M, MPI_INT, next, 21, W, &q) && OKC(Recv, r, (MPI_Count)M, MPI_INT, prev, 21, W, &st) &&
            OK(Wait, &q, MPI_STATUS_IGNORE)) {
            CHECK_I(r, e, M, "Isend_c/Recv_c round %d", round);
            CHECK_STATUS(st, prev, 21, MPI_INT, M);
        }
        CHECK_GUARD(r);
        tu_repoison(r);
        if (OKC(Irecv, r, (MPI_Count)M, MPI_INT, prev, 22, W, &q) && OKC(Send, s, (MPI_Count)M, MPI_INT, next, 22, W) &&
            OK(Wait, &q, MPI_STATUS_IGNORE))
            CHECK_I(r, e, M, "Irecv_c/Send_c round %d", round);
        CHECK_GUARD(r);
        /* MPI_Alltoallv_c: count arrays (a REJECT row: host buffers to the real MPI's _c call) */
        MPI_Count cnt[64];
        MPI_Aint dsp[64];
        int icnt[64], idsp[64];
        for (int i = 0; i < P && i < 64; i++) cnt[i] = icnt[i] = M, dsp[i] = idsp[i] = i * M;
        for (int i = 0; i < P * M; i++) s[i] = ival(R, 3 * i + round);
        tu_repoison(r);
        if (P <= 64 && OK(Alltoallv_c, s, cnt, dsp, MPI_INT, r, cnt, dsp, MPI_INT, W)) {
            PMPI_Alltoallv(s, icnt, idsp, MPI_INT, e, icnt, idsp, MPI_INT, W);
            CHECK_I(r, e, P * M, "Alltoallv_c round %d", round);
        }
        CHECK_GUARD(r);
    }
    /* a count above INT_MAX: the real MPI's _c call (a zero-size datatype: nothing moves) */
    MPI_Datatype t0;
    MPI_Type_contiguous(0, MPI_INT, &t0);
    MPI_Type_commit(&t0);
    OK(Bcast_c, r, (MPI_Count)INT_MAX + 1, t0, 0, W);
    MPI_Type_free(&t0);
    tu_free(s);
    tu_free(r);
}
#endif

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, &prev);
    t_isendrecv();
    t_persistent_colls();
    t_partitioned();
    t_comms();
#if NM_BUILD_HAVE_MPI_LARGE
    if (P * 2 <= 256) t_large();
#endif
    return tu_finalize();
}
