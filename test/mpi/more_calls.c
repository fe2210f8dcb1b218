/* The rest of MPI-3.1 that ncclmpi intercepts besides collectives, point-to-point and one-sided
 * and file calls (more_rma.c, more_io.c), on host buffers:
 *   persistent sends   MPI_Ssend_init Bsend_init Rsend_init (with Buffer_attach/Buffer_detach),
 *                      started twice with new data
 *   local calls        MPI_Reduce_local, Pack/Unpack, Pack_external/Unpack_external (external32
 *                      is big-endian: checked byte by byte)
 *   topologies         MPI_Cart_create (a periodic ring) with every neighbourhood collective and
 *                      its I-form, Cart_sub, Graph_create, Dist_graph_create(_adjacent)
 *   communicators      MPI_Comm_create_group (only the members call it), Comm_idup,
 *                      Intercomm_create/Intercomm_merge, Comm_disconnect
 *   dynamic processes  MPI_Comm_accept/Comm_connect, Comm_join (a TCP socket), Comm_spawn and
 *                      Comm_spawn_multiple (of this program, which then only talks to its parent)
 * Results are computed here from ranks and compared with what the real MPI returns.
 */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int R, P, next, prev;
static const MPI_Comm W = MPI_COMM_WORLD;
#define CHILD_ARG "--nm-spawned-child"

/* ---- persistent sends ------------------------------------------------------------------- */
static void t_persistent(void)
{
    enum { N = 300 };
    int bufsize = 2 * (N * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
    char *attach = (char *)malloc(bufsize);
    OK(Buffer_attach, attach, bufsize);
    int *s = (int *)tu_alloc(N * sizeof(int)), *r = (int *)tu_alloc(N * sizeof(int));
    const char *mode[3] = {"Ssend_init", "Bsend_init", "Rsend_init"};
    for (int m = 0; m < 3; m++) {
        MPI_Request sreq = MPI_REQUEST_NULL;
        if (m == 0) OK(Ssend_init, s, N, MPI_INT, next, 40 + m, W, &sreq);
        if (m == 1) OK(Bsend_init, s, N, MPI_INT, next, 40 + m, W, &sreq);
        if (m == 2) OK(Rsend_init, s, N, MPI_INT, next, 40 + m, W, &sreq);
        /* Open MPI 4.1 delivers zeros when a buffered persistent send to the process itself is
         * started again (plain MPI, no ncclmpi): one round there */
        int rounds = m == 1 && P == 1 ? 1 : 2;
        for (int round = 0; round < rounds; round++) {
            for (int i = 0; i < N; i++) s[i] = aval(R, m * 10 + round, i);
            tu_repoison(r);
            MPI_Request rreq;
            MPI_Status st;
            OK(Irecv, r, N, MPI_INT, prev, 40 + m, W, &rreq);
            OK(Barrier, W); /* every receive is posted before a ready send starts */
            OK(Start, &sreq);
            OK(Wait, &rreq, &st);
            OK(Wait, &sreq, MPI_STATUS_IGNORE);
            int e[N];
            for (int i = 0; i < N; i++) e[i] = aval(prev, m * 10 + round, i);
            CHECK_I(r, e, N, "%s round %d", mode[m], round);
            CHECK_GUARD(r);
            CHECK_STATUS(st, prev, 40 + m, MPI_INT, N);
            CHECK(sreq != MPI_REQUEST_NULL, "%s: the persistent request went away", mode[m]);
        }
        MPI_Request_free(&sreq);
    }
    void *back = NULL;
    int backsize = -1;
    OK(Buffer_detach, &back, &backsize);
    CHECK(back == attach && backsize == bufsize, "Buffer_detach gave %p %d, attached %p %d", back, backsize,
          (void *)attach, bufsize);
    free(attach);
    tu_free(s);
    tu_free(r);
}

/* ---- local calls ------------------------------------------------------------------------ */
static void t_reduce_local(void)
{
    enum { N = 1001 };
    int in[N], io[N], e[N];
    for (int i = 0; i < N; i++) in[i] = ival(R, i), io[i] = ival(R + 7, i), e[i] = in[i] + io[i];
    OK(Reduce_local, in, io, N, MPI_INT, MPI_SUM);
    CHECK_I(io, e, N, "Reduce_local SUM int");
    double a[N], b[N], d[N];
    for (int i = 0; i < N; i++) {
        a[i] = dval(R, i) * (i % 2 ? 1 : -1);
        b[i] = dval(R + 1, N - i);
        d[i] = a[i] > b[i] ? a[i] : b[i];
    }
    OK(Reduce_local, a, b, N, MPI_DOUBLE, MPI_MAX);
    CHECK_D(b, d, N, "Reduce_local MAX double");
    /* (Open MPI 4.1 refuses predefined ops on derived datatypes here: MPI_ERR_OP) */
    long long la[N], lb[N], le[N];
    for (int i = 0; i < N; i++) la[i] = (long long)ival(R, i) << 20, lb[i] = ~(long long)i, le[i] = la[i] & lb[i];
    OK(Reduce_local, la, lb, N, MPI_LONG_LONG, MPI_BAND);
    CHECK_LL(lb, le, N, "Reduce_local BAND long long");
}

static void t_pack(void)
{
    enum { NV = 3, ND = 9 };
    int v[NV * 12];
    double dv[ND];
    for (int i = 0; i < NV * 12; i++) v[i] = ival(R, i);
    for (int i = 0; i < ND; i++) dv[i] = dval(R, i);
    int need1 = 0, need2 = 0;
    MPI_Pack_size(NV, T_VEC, W, &need1);
    MPI_Pack_size(ND, MPI_DOUBLE, W, &need2);
    int size = need1 + need2;
    char *packed = (char *)tu_alloc(size);
    int pos = 0;
    OK(Pack, v, NV, T_VEC, packed, size, &pos, W);
    OK(Pack, dv, ND, MPI_DOUBLE, packed, size, &pos, W);
    CHECK(pos == NV * 6 * (int)sizeof(int) + ND * (int)sizeof(double), "Pack position %d", pos);
    CHECK_GUARD(packed);
    /* the packed ints are the vector's data, in order */
    int flat[NV * 6];
    memcpy(flat, packed, sizeof(flat));
    for (long k = 0; k < NV * 6; k++) CHECK(flat[k] == v[mt_pos(&M_VEC, k)], "packed int %ld", k);
    int uv[NV * 12], ue[NV * 12];
    double ud[ND];
    for (int i = 0; i < NV * 12; i++) uv[i] = ue[i] = tu_int_poison();
    for (long k = 0; k < NV * 6; k++) ue[mt_pos(&M_VEC, k)] = v[mt_pos(&M_VEC, k)];
    tu_poison(ud, sizeof(ud));
    int upos = 0;
    OK(Unpack, packed, size, &upos, uv, NV, T_VEC, W);
    OK(Unpack, packed, size, &upos, ud, ND, MPI_DOUBLE, W);
    CHECK(upos == pos, "Unpack position %d, packed %d", upos, pos);
    CHECK_I(uv, ue, NV * 12, "Unpack %s (gaps untouched)", M_VEC.name);
    CHECK_D(ud, dv, ND, "Unpack double");
    tu_free(packed);

    /* external32: big-endian, 4-byte ints */
    enum { NE = 7 };
    int ev[NE], eu[NE];
    for (int i = 0; i < NE; i++) ev[i] = ival(R, i) * (i % 2 ? -1 : 1);
    MPI_Aint esize = 0, epos = 0, eupos = 0;
    MPI_Pack_external_size("external32", NE, MPI_INT, &esize);
    CHECK(esize == NE * 4, "Pack_external_size %ld", (long)esize);
    unsigned char *ext = (unsigned char *)tu_alloc(esize);
    OK(Pack_external, "external32", ev, NE, MPI_INT, ext, esize, &epos);
    CHECK(epos == esize, "Pack_external position %ld of %ld", (long)epos, (long)esize);
    CHECK_GUARD(ext);
    for (int i = 0; i < NE; i++) {
        unsigned u = (unsigned)ev[i];
        unsigned char be[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16), (unsigned char)(u >> 8), (unsigned char)u};
        CHECK(!memcmp(ext + 4 * i, be, 4), "external32 int %d is not big-endian %d", i, ev[i]);
    }
    tu_poison(eu, sizeof(eu));
    OK(Unpack_external, "external32", ext, esize, &eupos, eu, NE, MPI_INT);
    CHECK(eupos == esize, "Unpack_external position %ld", (long)eupos);
    CHECK_I(eu, ev, NE, "Unpack_external round trip");
    tu_free(ext);
}

/* ---- topologies and neighbourhood collectives -------------------------------------------- */
/* Neighbours of a periodic ring in the order MPI gives them: [rank-1, rank+1]. */
static void t_neighbors(void)
{
    MPI_Comm ring;
    int dims[1] = {P}, periods[1] = {1};
    if (!OK(Cart_create, W, 1, dims, periods, 0, &ring)) return;
    int src = -1, dst = -1;
    MPI_Cart_shift(ring, 0, 1, &src, &dst);
    CHECK(src == prev && dst == next, "ring shift %d %d", src, dst);
    const int nb[2] = {prev, next};
    /* With one or two processes both neighbours are the same process, and which of its two
     * blocks lands where is the implementation's choice: compare as sets there. */
    const int pairs_exact = P > 2;
    enum { C = 5 };
    int sb[2 * C], rb[2 * C], e[2 * C];
    MPI_Request q;

#define EXPECT_BLOCKS(what, blk) /* blk(src, k, i): element i of the block src sent to neighbour k */ \
    do {                                                                                      \
        for (int j = 0; j < 2; j++)                                                           \
            for (int i = 0; i < C; i++) e[j * C + i] = blk(nb[j], 1 - j, i);                  \
        if (pairs_exact) {                                                                    \
            CHECK_I(rb, e, 2 * C, "%s", what);                                                \
        } else {                                                                              \
            int ok_ = 1, sw_ = 1;                                                             \
            for (int i = 0; i < 2 * C; i++) ok_ &= rb[i] == e[i], sw_ &= rb[i] == e[(i + C) % (2 * C)]; \
            CHECK(ok_ || sw_, "%s: blocks %d.. %d..", what, rb[0], rb[C]);                    \
        }                                                                                     \
    } while (0)
#define GATHER_BLK(s, k, i) aval(s, 0, i)
#define A2A_BLK(s, k, i) aval(s, k + 1, i)

    for (int nbk = 0; nbk < 2; nbk++) {
        for (int i = 0; i < C; i++) sb[i] = aval(R, 0, i);
        tu_poison(rb, sizeof(rb));
        if (nbk) {
            OK(Ineighbor_allgather, sb, C, MPI_INT, rb, C, MPI_INT, ring, &q);
            OK(Wait, &q, MPI_STATUS_IGNORE);
        } else {
            OK(Neighbor_allgather, sb, C, MPI_INT, rb, C, MPI_INT, ring);
        }
        EXPECT_BLOCKS(nbk ? "Ineighbor_allgather" : "Neighbor_allgather", GATHER_BLK);

        /* allgatherv: neighbour j's block at displacement j * (C + 1), C ints */
        int rv[2 * (C + 1)], ev[2 * (C + 1)], rc[2] = {C, C}, rd[2] = {C + 1, 0};
        for (int i = 0; i < 2 * (C + 1); i++) rv[i] = ev[i] = tu_int_poison();
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < C; i++) ev[rd[j] + i] = aval(nb[j], 0, i);
        if (nbk) {
            OK(Ineighbor_allgatherv, sb, C, MPI_INT, rv, rc, rd, MPI_INT, ring, &q);
            OK(Wait, &q, MPI_STATUS_IGNORE);
        } else {
            OK(Neighbor_allgatherv, sb, C, MPI_INT, rv, rc, rd, MPI_INT, ring);
        }
        CHECK_I(rv, ev, 2 * (C + 1), "%s", nbk ? "Ineighbor_allgatherv" : "Neighbor_allgatherv");

        /* alltoall: block k to neighbour k */
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < C; i++) sb[k * C + i] = aval(R, k + 1, i);
        tu_poison(rb, sizeof(rb));
        if (nbk) {
            OK(Ineighbor_alltoall, sb, C, MPI_INT, rb, C, MPI_INT, ring, &q);
            OK(Wait, &q, MPI_STATUS_IGNORE);
        } else {
            OK(Neighbor_alltoall, sb, C, MPI_INT, rb, C, MPI_INT, ring);
        }
        EXPECT_BLOCKS(nbk ? "Ineighbor_alltoall" : "Neighbor_alltoall", A2A_BLK);

        /* alltoallv: the same blocks, stored the other way round in both buffers */
        int sc[2] = {C, C}, sd[2] = {C, 0}, rcv[2] = {C, C}, rdv[2] = {C, 0}, tmp[2 * C];
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < C; i++) tmp[sd[k] + i] = aval(R, k + 1, i);
        tu_poison(rb, sizeof(rb));
        if (nbk) {
            OK(Ineighbor_alltoallv, tmp, sc, sd, MPI_INT, rb, rcv, rdv, MPI_INT, ring, &q);
            OK(Wait, &q, MPI_STATUS_IGNORE);
        } else {
            OK(Neighbor_alltoallv, tmp, sc, sd, MPI_INT, rb, rcv, rdv, MPI_INT, ring);
        }
        int back[2 * C];
        memcpy(back, rb + C, C * sizeof(int)); /* undo the swap for the check */
        memcpy(back + C, rb, C * sizeof(int));
        memcpy(rb, back, sizeof(back));
        EXPECT_BLOCKS(nbk ? "Ineighbor_alltoallv" : "Neighbor_alltoallv", A2A_BLK);

        /* alltoallw: byte displacements and a type per neighbour (ints, and 5 ints as one) */
        MPI_Datatype five;
        MPI_Type_contiguous(C, MPI_INT, &five);
        MPI_Type_commit(&five);
        int wc[2] = {C, 1};
        MPI_Aint wd[2] = {0, C * (MPI_Aint)sizeof(int)};
        MPI_Datatype wt[2] = {MPI_INT, five};
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < C; i++) sb[k * C + i] = aval(R, k + 1, i);
        tu_poison(rb, sizeof(rb));
        if (nbk) {
            OK(Ineighbor_alltoallw, sb, wc, wd, wt, rb, wc, wd, wt, ring, &q);
            OK(Wait, &q, MPI_STATUS_IGNORE);
        } else {
            OK(Neighbor_alltoallw, sb, wc, wd, wt, rb, wc, wd, wt, ring);
        }
        EXPECT_BLOCKS(nbk ? "Ineighbor_alltoallw" : "Neighbor_alltoallw", A2A_BLK);
        MPI_Type_free(&five);
    }

    /* Cart_sub of a 2-D grid: rows */
    int d2[2] = {0, 0}, p2[2] = {0, 1}, keep[2] = {0, 1};
    MPI_Dims_create(P, 2, d2);
    MPI_Comm grid, row;
    if (OK(Cart_create, W, 2, d2, p2, 0, &grid)) {
        if (OK(Cart_sub, grid, keep, &row)) {
            int rs = -1, rr = -1;
            MPI_Comm_size(row, &rs);
            MPI_Comm_rank(row, &rr);
            CHECK(rs == d2[1] && rr == R % d2[1], "Cart_sub row: size %d rank %d (grid %dx%d)", rs, rr, d2[0], d2[1]);
            MPI_Comm_free(&row);
        }
        MPI_Comm_free(&grid);
    }
    /* the ring as a graph, as a distributed graph (each rank names its outgoing edge), and as
     * an adjacent distributed graph: the neighbours must come out as given */
    int *index = (int *)malloc(P * sizeof(int)), *edges = (int *)malloc(2 * P * sizeof(int));
    for (int i = 0; i < P; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + P - 1) % P;
        edges[2 * i + 1] = (i + 1) % P;
    }
    MPI_Comm g;
    if (OK(Graph_create, W, P, index, edges, 0, &g)) {
        int nn = -1, got[2] = {-1, -1};
        MPI_Graph_neighbors_count(g, R, &nn);
        MPI_Graph_neighbors(g, R, 2, got);
        CHECK(nn == 2 && got[0] == prev && got[1] == next, "Graph_create neighbours %d: %d %d", nn, got[0], got[1]);
        MPI_Comm_free(&g);
    }
    free(index);
    free(edges);
    /* edge weights: the source's world rank + 10 */
    int one = 1, me = R, to = next, wt = R + 10;
    if (OK(Dist_graph_create, W, 1, &me, &one, &to, &wt, MPI_INFO_NULL, 0, &g)) {
        int in = -1, out = -1, w = -1, s1 = -1, d1 = -1, sw = -1, dw = -1;
        MPI_Dist_graph_neighbors_count(g, &in, &out, &w);
        if (in == 1 && out == 1) MPI_Dist_graph_neighbors(g, 1, &s1, &sw, 1, &d1, &dw);
        CHECK(in == 1 && out == 1 && w && s1 == prev && d1 == next && sw == prev + 10 && dw == R + 10,
              "Dist_graph_create: in %d out %d weighted %d source %d (%d) dest %d (%d)", in, out, w, s1, sw, d1, dw);
        /* a neighbourhood collective on it: the value of the one source */
        int v = aval(R, 9, 0), got = -1;
        OK(Neighbor_allgather, &v, 1, MPI_INT, &got, 1, MPI_INT, g);
        CHECK(got == aval(prev, 9, 0), "Neighbor_allgather on the distributed graph: %d", got);
        MPI_Comm_free(&g);
    }
    int inw = prev + 20, outw = R + 20;
    if (OK(Dist_graph_create_adjacent, W, 1, &prev, &inw, 1, &next, &outw, MPI_INFO_NULL, 0, &g)) {
        int in = -1, out = -1, w = -1, s1 = -1, d1 = -1, sw = -1, dw = -1;
        MPI_Dist_graph_neighbors_count(g, &in, &out, &w);
        if (in == 1 && out == 1) MPI_Dist_graph_neighbors(g, 1, &s1, &sw, 1, &d1, &dw);
        CHECK(in == 1 && out == 1 && s1 == prev && d1 == next && sw == inw && dw == outw,
              "Dist_graph_create_adjacent: %d %d %d (%d) %d (%d)", in, out, s1, sw, d1, dw);
        MPI_Comm_free(&g);
    }
    MPI_Comm_free(&ring);
#undef EXPECT_BLOCKS
#undef GATHER_BLK
#undef A2A_BLK
}

/* ---- communicators ------------------------------------------------------------------------ */
static void check_sum(MPI_Comm c, long expect, const char *what)
{
    int v = R, s = -1;
    OK(Allreduce, &v, &s, 1, MPI_INT, MPI_SUM, c);
    CHECK(s == expect, "%s: Allreduce of world ranks %d, expected %ld", what, s, expect);
}

static void t_comms(void)
{
    /* Comm_create_group: only the members (even world ranks) call it */
    MPI_Group wg, eg;
    MPI_Comm_group(W, &wg);
    int range[1][3] = {{0, P - 1, 2}};
    MPI_Group_range_incl(wg, 1, range, &eg);
    long evensum = 0;
    for (int i = 0; i < P; i += 2) evensum += i;
    if (R % 2 == 0) {
        MPI_Comm ec;
        if (OK(Comm_create_group, W, eg, 7, &ec)) {
            int s = -1;
            MPI_Comm_size(ec, &s);
            CHECK(s == (P + 1) / 2, "Comm_create_group size %d", s);
            check_sum(ec, evensum, "Comm_create_group");
            MPI_Comm_free(&ec);
        }
    }
    MPI_Group_free(&eg);
    MPI_Group_free(&wg);

    /* Comm_idup: usable once its request completes */
    MPI_Comm d;
    MPI_Request q;
    if (OK(Comm_idup, W, &d, &q)) {
        OK(Wait, &q, MPI_STATUS_IGNORE);
        check_sum(d, (long)P * (P - 1) / 2, "Comm_idup");
        int cmp = -1;
        MPI_Comm_compare(W, d, &cmp);
        CHECK(cmp == MPI_CONGRUENT, "Comm_idup: compare %d", cmp);
        /* Comm_disconnect waits for the traffic on it, then frees it */
        OK(Comm_disconnect, &d);
        CHECK(d == MPI_COMM_NULL, "Comm_disconnect left the handle set");
    }
    if (P < 2) return;

    /* Intercomm_create between even and odd world ranks; Intercomm_merge, odd ranks high */
    MPI_Comm half, inter, merged;
    MPI_Comm_split(W, R % 2, R, &half);
    if (OK(Intercomm_create, half, 0, W, R % 2 ? 0 : 1, 21, &inter)) {
        int rs = -1, flag = 0;
        MPI_Comm_test_inter(inter, &flag);
        MPI_Comm_remote_size(inter, &rs);
        CHECK(flag && rs == (R % 2 ? (P + 1) / 2 : P / 2), "Intercomm_create: inter %d remote size %d", flag, rs);
        /* the leaders swap their world ranks over it */
        if ((R == 0 || R == 1)) {
            int mine = R, theirs = -1;
            MPI_Status st;
            OK(Sendrecv, &mine, 1, MPI_INT, 0, 3, &theirs, 1, MPI_INT, 0, 3, inter, &st);
            CHECK(theirs == 1 - R, "intercommunicator Sendrecv got %d", theirs);
        }
        if (OK(Intercomm_merge, inter, R % 2, &merged)) {
            /* evens (low) first, each half in its world order */
            int mr = -1, expect = R % 2 ? (P + 1) / 2 + R / 2 : R / 2;
            MPI_Comm_rank(merged, &mr);
            CHECK(mr == expect, "Intercomm_merge: rank %d, expected %d", mr, expect);
            check_sum(merged, (long)P * (P - 1) / 2, "Intercomm_merge");
            MPI_Comm_free(&merged);
        }
        OK(Comm_disconnect, &inter);
    }
    MPI_Comm_free(&half);
}

/* ---- dynamic processes ------------------------------------------------------------------- */
/* the spawned copy of this program: say who it is to the parent's root, then leave */
static int spawned_child(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    int rc = 1;
    if (parent != MPI_COMM_NULL) {
        int r = -1, v[2];
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        v[0] = r;
        v[1] = atoi(argv[argc - 1]);
        MPI_Send(v, 2, MPI_INT, 0, 77, parent);
        MPI_Comm_disconnect(&parent);
        rc = 0;
    }
    MPI_Finalize();
    return rc;
}

/* the root hears from `n` children with the marker `tag` */
static void hear_children(MPI_Comm inter, int n, int tag, const char *what)
{
    int rs = -1;
    MPI_Comm_remote_size(inter, &rs);
    CHECK(rs == n, "%s: %d children, asked for %d", what, rs, n);
    if (R != 0) return;
    for (int c = 0; c < rs; c++) {
        int v[2] = {-1, -1};
        MPI_Status st;
        OK(Recv, v, 2, MPI_INT, MPI_ANY_SOURCE, 77, inter, &st);
        CHECK(v[0] == st.MPI_SOURCE && v[1] == tag, "%s: child %d said %d %d", what, st.MPI_SOURCE, v[0], v[1]);
    }
}

static void t_dynamic(const char *self)
{
    /* spawn one copy of this program, then one through Comm_spawn_multiple */
    char tag1[] = "1001", tag2[] = "1002", child[] = CHILD_ARG;
    char *args1[] = {child, tag1, NULL}, *args2[] = {child, tag2, NULL};
    MPI_Comm inter;
    int err[1] = {-1};
    if (OK(Comm_spawn, self, args1, 1, MPI_INFO_NULL, 0, W, &inter, err)) {
        CHECK(R != 0 || err[0] == MPI_SUCCESS, "Comm_spawn error code %d", err[0]);
        hear_children(inter, 1, 1001, "Comm_spawn");
        OK(Comm_disconnect, &inter);
    }
    char *cmds[1] = {(char *)self};
    char **argvs[1] = {args2};
    int maxprocs[1] = {1};
    MPI_Info infos[1] = {MPI_INFO_NULL};
    if (OK(Comm_spawn_multiple, 1, cmds, argvs, maxprocs, infos, 0, W, &inter, err)) {
        hear_children(inter, 1, 1002, "Comm_spawn_multiple");
        OK(Comm_disconnect, &inter);
    }
    if (P < 2) return;

    /* accept / connect between the even and the odd world ranks */
    MPI_Comm half;
    MPI_Comm_split(W, R % 2, R, &half);
    char port[MPI_MAX_PORT_NAME] = "";
    if (R == 0) MPI_Open_port(MPI_INFO_NULL, port);
    OK(Bcast, port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, W);
    if (R % 2 == 0) OK(Comm_accept, port, MPI_INFO_NULL, 0, half, &inter);
    else OK(Comm_connect, port, MPI_INFO_NULL, 0, half, &inter);
    int rs = -1;
    MPI_Comm_remote_size(inter, &rs);
    CHECK(rs == (R % 2 ? (P + 1) / 2 : P / 2), "accept/connect: remote size %d", rs);
    int mine = R, theirs = -1;
    if (R < 2) {
        OK(Sendrecv, &mine, 1, MPI_INT, 0, 5, &theirs, 1, MPI_INT, 0, 5, inter, MPI_STATUS_IGNORE);
        CHECK(theirs == 1 - R, "accept/connect: Sendrecv got %d", theirs);
    }
    OK(Comm_disconnect, &inter);
    MPI_Comm_free(&half);
    if (R == 0) MPI_Close_port(port);

    /* Comm_join over a TCP connection between world ranks 0 and 1 */
    if (R > 1) return;
    int fd = -1, lfd = -1, port_no = 0;
    if (R == 0) {
        struct sockaddr_in a;
        socklen_t al = sizeof(a);
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1) ||
            getsockname(lfd, (struct sockaddr *)&a, &al))
            port_no = -1;
        else
            port_no = ntohs(a.sin_port);
        OK(Send, &port_no, 1, MPI_INT, 1, 6, W);
        if (port_no > 0) fd = accept(lfd, NULL, NULL);
    } else {
        OK(Recv, &port_no, 1, MPI_INT, 0, 6, W, MPI_STATUS_IGNORE);
        if (port_no > 0) {
            struct sockaddr_in a;
            memset(&a, 0, sizeof(a));
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((unsigned short)port_no);
            fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) fd = -1;
        }
    }
    CHECK(port_no > 0 && fd >= 0, "no loopback TCP connection for Comm_join (port %d fd %d)", port_no, fd);
    if (port_no > 0 && fd >= 0 && OK(Comm_join, fd, &inter)) {
        theirs = -1;
        OK(Sendrecv, &mine, 1, MPI_INT, 0, 8, &theirs, 1, MPI_INT, 0, 8, inter, MPI_STATUS_IGNORE);
        CHECK(theirs == 1 - R, "Comm_join: Sendrecv got %d", theirs);
        OK(Comm_disconnect, &inter);
    }
    if (fd >= 0) close(fd);
    if (lfd >= 0) close(lfd);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], CHILD_ARG)) return spawned_child(argc, argv);
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, &prev);
    tu_types_create();
    t_persistent();
    t_reduce_local();
    t_pack();
    t_neighbors();
    t_comms();
    t_dynamic(argv[0]);
    tu_types_free();
    return tu_finalize();
}
