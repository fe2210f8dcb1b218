/* mpi4_device_prog: the MPI-4 calls of the table (the |MPI4 rows of src/interpose/mpi_api.def) on
 * device buffers of the stand-in CUDA driver (test/unit/fake_cuda.c; its device memory is host
 * memory, so the program fills and checks it directly), run by test/unit/mpi4_device.sh:
 *   MPI_Isendrecv, MPI_Isendrecv_replace   around the ring and with the rank itself, device and
 *                                          host buffers mixed: every byte against PMPI_Sendrecv
 *                                          (_replace) on host copies, statuses, the staged route
 *   persistent collectives on device buffers (every kind with buffers; the v/w forms with the
 *                                          last rank's count 0; count arrays freed after the
 *                                          init, as mpi4py's large-count forms do): 4 rounds of
 *                                          new data per request, each round's start completed by
 *                                          MPI_Wait, an MPI_Test loop, MPI_Startall + MPI_Waitall,
 *                                          or MPI_Request_get_status then MPI_Wait; every byte
 *                                          against PMPI's blocking form on host copies; a derived
 *                                          type freed after the init; two requests in one
 *                                          MPI_Startall; the starts counted on the nonblocking
 *                                          form's routes (NCCL where MPI4_EXPECT_NCCL=1)
 *   partitioned communication            MPI_Psend_init / MPI_Precv_init around the ring, one
 *                                          request pair a run (MPI4_PART_CASE): each side device or
 *                                          host memory, three rounds:
 *                                          each send partition written just before the MPI_Pready,
 *                                          MPI_Pready_range or MPI_Pready_list that marks it (so a
 *                                          copy made earlier would send stale data); every
 *                                          partition's data checked on the device as soon as
 *                                          MPI_Parrived reports it; the whole buffer after MPI_Waitall
 *                                          or an MPI_Test loop; the receiver's partitions unlike the
 *                                          sender's; a datatype with gaps, whose gaps stay as they
 *                                          were (one partition a side: Open MPI 5.0.11 itself loses
 *                                          data of such a type in several); every int by value and
 *                                          against PMPI_Sendrecv of the message on host copies;
 *                                          counted on the staged route
 *   persistent neighbourhood collectives   (3 ranks or more) the five kinds on a periodic 1-D Cartesian ring on
 *                                          device buffers, their arrays freed after the init, 4
 *                                          starts each against PMPI's blocking form on host copies
 *                                          (the elements past the output untouched); each init on
 *                                          the restarted (staged) route
 *   MPI_Request_get_status_any/all/some (MPI-4.1, where the MPI has them) on two persistent
 *                                          receives into device buffers: each receive they report
 *                                          complete is on the device at once, then MPI_Waitall's
 *                                          statuses and data
 *   large-count forms (MPI_<Name>_c), where the MPI has them: counts that fit an int on device
 *                                          buffers are the int form's calls (every byte against
 *                                          PMPI on host copies, counted on the int form's device
 *                                          routes, never its host one); a count above INT_MAX on a
 *                                          device buffer fails with MPI_ERR_COUNT naming the call,
 *                                          output untouched, request null; MPI_Alltoallv_c on device
 *                                          buffers MPI_ERR_BUFFER, on host buffers right; a count
 *                                          above INT_MAX on host buffers (a zero-size datatype)
 *                                          goes to the real MPI
 * Prints "mpi4_device_prog: ok" when every check passed.
 */
#include <mpi.h>
#include <ncclmpi.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"
#include "nm_build.h" /* NM_BUILD_HAVE_MPI_LARGE: the MPI has the large-count (_c) forms */

enum { N = 1000, NBUF = 4 };
static int rank, size, failures;

#define FAIL(...)                                  \
    do {                                           \
        failures++;                                \
        printf("rank %d: ", rank);                 \
        printf(__VA_ARGS__);                       \
        printf("\n");                              \
    } while (0)

static int val(int from, int round, int i) { return from * 1000003 + round * 10007 + i + 1; }

static unsigned long long route_calls(const char *fn, int route)
{
    int (*get)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    unsigned long long n = 0;
    return get && get(fn, route, &n) == 0 ? n : 0;
}

/* device or host, by bit k of mask */
static int *pick(int **dev, int **host, int mask, int k) { return (mask >> k) & 1 ? dev[k] : host[k]; }

static void t_isendrecv(MPI_Comm c, int **dev, int **host)
{
    static int ref[N], hs[N];
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int mask = 0; mask < 4; mask++)
        for (int self = 0; self < 2; self++) {
            const int to = self ? rank : next, from = self ? rank : prev, round = 2 * mask + self;
            int *s = pick(dev, host, mask, 0), *r = pick(dev, host, mask, 1);
            for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, round, i), r[i] = ref[i] = -7;
            MPI_Request q = MPI_REQUEST_NULL;
            MPI_Status st;
            /* (a receive with room for one more element: the last one stays as it was) */
            int rc = MPI_Isendrecv(s, N - 1, MPI_INT, to, 5, r, N, MPI_INT, from, 5, c, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
            PMPI_Sendrecv(hs, N - 1, MPI_INT, to, 6, ref, N, MPI_INT, from, 6, c, MPI_STATUS_IGNORE);
            int cnt = -1;
            MPI_Get_count(&st, MPI_INT, &cnt);
            if (rc != MPI_SUCCESS || memcmp(r, ref, N * sizeof(int)) || st.MPI_SOURCE != from || st.MPI_TAG != 5 ||
                cnt != N - 1)
                FAIL("MPI_Isendrecv (buffers %s/%s, %s): rc %d, source %d, tag %d, count %d, element 0 %d (PMPI %d)",
                     mask & 1 ? "device" : "host", mask & 2 ? "device" : "host", self ? "itself" : "ring", rc,
                     st.MPI_SOURCE, st.MPI_TAG, cnt, r[0], ref[0]);
            int *b = pick(dev, host, mask, 2);
            for (int i = 0; i < N; i++) b[i] = ref[i] = val(rank, round + 50, i);
            rc = MPI_Isendrecv_replace(b, N, MPI_INT, to, 7, from, 7, c, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
            PMPI_Sendrecv_replace(ref, N, MPI_INT, to, 8, from, 8, c, MPI_STATUS_IGNORE);
            MPI_Get_count(&st, MPI_INT, &cnt);
            if (rc != MPI_SUCCESS || memcmp(b, ref, N * sizeof(int)) || st.MPI_SOURCE != from || st.MPI_TAG != 7 ||
                cnt != N)
                FAIL("MPI_Isendrecv_replace (buffer %s, %s): rc %d, source %d, tag %d, count %d, element 0 %d (PMPI %d)",
                     mask & 4 ? "device" : "host", self ? "itself" : "ring", rc, st.MPI_SOURCE, st.MPI_TAG, cnt, b[0],
                     ref[0]);
        }
}

/* ---- persistent neighbourhood collectives on device buffers: restarted on every rank ---- */
enum { NK = 3 };
/* kind k's persistent call on the 1-D periodic ring (two blocks: toward -1, toward +1), its
 * arrays poisoned and freed once the init returned; ref: PMPI's persistent form, started once and
 * freed. Alltoallv/w send
 * NK ints toward -1 and 1 toward +1, so they receive 1 from -1 and NK from +1; Allgatherv leaves a
 * gap of 2 between its blocks, Alltoallv/w too. Returns the elements of r the call defines. */
static int n_call(int k, const int *s, int *r, MPI_Comm ring, MPI_Request *q, int ref, int *rc)
{
    const MPI_Info I = MPI_INFO_NULL;
    const MPI_Datatype T = MPI_INT;
    const int one = 1;
    int sc[2] = {NK, one}, sd[2] = {0, NK}, rcv[2] = {one, NK}, rd[2] = {0, one + 2}, gc[2] = {NK, NK}, gd[2] = {0, NK + 2};
    MPI_Aint sa[2] = {0, NK * (MPI_Aint)sizeof(int)}, ra[2] = {0, (one + 2) * (MPI_Aint)sizeof(int)};
    MPI_Datatype ty[2] = {MPI_INT, MPI_INT};
    int *a[4];
    MPI_Aint *b[2];
    MPI_Datatype *t = malloc(2 * sizeof(MPI_Datatype));
    for (int i = 0; i < 4; i++) a[i] = malloc(2 * sizeof(int));
    for (int i = 0; i < 2; i++) b[i] = malloc(2 * sizeof(MPI_Aint));
    if (!t || !a[0] || !a[1] || !a[2] || !a[3] || !b[0] || !b[1]) MPI_Abort(MPI_COMM_WORLD, 2);
    const int *src[4] = {k == 1 ? gc : sc, k == 1 ? gd : sd, rcv, rd};
    for (int i = 0; i < 4; i++) memcpy(a[i], src[i], sizeof(sc));
    memcpy(b[0], sa, sizeof(sa)), memcpy(b[1], ra, sizeof(ra)), memcpy(t, ty, sizeof(ty));
    int out = 0;
    switch (k) {
    case 0:
        *rc = ref ? PMPI_Neighbor_allgather_init(s, NK, T, r, NK, T, ring, I, q) : MPI_Neighbor_allgather_init(s, NK, T, r, NK, T, ring, I, q);
        out = 2 * NK;
        break;
    case 1:
        *rc = ref ? PMPI_Neighbor_allgatherv_init(s, NK, T, r, gc, gd, T, ring, I, q)
                  : MPI_Neighbor_allgatherv_init(s, NK, T, r, a[0], a[1], T, ring, I, q);
        out = 2 * NK + 2;
        break;
    case 2:
        *rc = ref ? PMPI_Neighbor_alltoall_init(s, NK, T, r, NK, T, ring, I, q) : MPI_Neighbor_alltoall_init(s, NK, T, r, NK, T, ring, I, q);
        out = 2 * NK;
        break;
    case 3:
        *rc = ref ? PMPI_Neighbor_alltoallv_init(s, sc, sd, T, r, rcv, rd, T, ring, I, q)
                  : MPI_Neighbor_alltoallv_init(s, a[0], a[1], T, r, a[2], a[3], T, ring, I, q);
        out = one + 2 + NK;
        break;
    default:
        *rc = ref ? PMPI_Neighbor_alltoallw_init(s, sc, sa, ty, r, rcv, ra, ty, ring, I, q)
                  : MPI_Neighbor_alltoallw_init(s, a[0], b[0], t, r, a[2], b[1], t, ring, I, q);
        out = one + 2 + NK;
    }
    if (ref && *rc == MPI_SUCCESS && (*rc = PMPI_Start(q)) == MPI_SUCCESS) {
        *rc = PMPI_Wait(q, MPI_STATUS_IGNORE);
        PMPI_Request_free(q);
    }
    for (int i = 0; i < 4; i++) a[i][0] = a[i][1] = -7777777, free(a[i]);
    for (int i = 0; i < 2; i++) b[i][0] = b[i][1] = -7777777, free(b[i]);
    t[0] = t[1] = MPI_DATATYPE_NULL, free(t);
    return out;
}

static void t_neighbor_persistent(MPI_Comm ring, int **dev)
{
    /* (at 1 or 2 ranks both blocks of the dimension pair with one process, and Open MPI 5.0.11
     * answers differently there in its blocking form (as MPI 4.0 specifies, and ncclmpi's
     * neighbourhood collectives as point-to-point) and in its nonblocking and persistent forms) */
    if (size < 3) return;
    static const char *const names[5] = {"Neighbor_allgather_init", "Neighbor_allgatherv_init", "Neighbor_alltoall_init",
                                          "Neighbor_alltoallv_init", "Neighbor_alltoallw_init"};
    static int hs[N], ref[N];
    int *s = dev[0], *r = dev[1];
    for (int k = 0; k < 5; k++) {
        MPI_Request q;
        int rc;
        memset(&q, 0xA5, sizeof(q));
        const int out = n_call(k, s, r, ring, &q, 0, &rc);
        if (rc != MPI_SUCCESS || q == MPI_REQUEST_NULL) {
            FAIL("MPI_%s on device buffers: rc %d", names[k], rc);
            continue;
        }
        for (int round = 0; round < 4; round++) {
            for (int i = 0; i < N; i++) hs[i] = s[i] = val(rank, round + 20, i), r[i] = ref[i] = -7;
            rc = round % 2 ? MPI_Startall(1, &q) : MPI_Start(&q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
            int rrc;
            MPI_Request rq;
            n_call(k, hs, ref, ring, &rq, 1, &rrc);
            if (rc != MPI_SUCCESS || rrc != MPI_SUCCESS) FAIL("MPI_%s, round %d: rc %d (PMPI %d)", names[k], round, rc, rrc);
            for (int i = 0; i < out + 4; i++)  /* (past the output: untouched on both sides) */
                if (r[i] != ref[i]) {
                    FAIL("MPI_%s on device buffers, round %d: element %d is %d, PMPI %d", names[k], round, i, r[i], ref[i]);
                    break;
                }
        }
        MPI_Request_free(&q);
        if (route_calls(names[k], NCCLMPI_ROUTE_STAGED) != 1 || route_calls(names[k], NCCLMPI_ROUTE_ERROR) != 0)
            FAIL("MPI_%s on device buffers: not one init on its restarted route (%llu)", names[k],
                 route_calls(names[k], NCCLMPI_ROUTE_STAGED));
    }
}

/* ---- partitioned communication on device buffers: staged per partition ---- */
enum { PARTS = 8, PCNT = 60 };  /* (PARTS * PCNT <= N / 2: the datatype with gaps spans twice that) */

/* partition p of the send buffer written (its elements of extent `stride` ints), just before it is marked ready */
static void part_fill(int *s, int p, int stride, int round)
{
    for (int i = p * PCNT; i < (p + 1) * PCNT; i++) s[i * stride] = val(rank, round, i);
}

/* elements [a, b) of the receive buffer hold what the previous rank sent: by value, and every int
 * they span (gaps included) as PMPI's exchange of the same message on host copies left it */
static int part_check(const int *r, const int *ref, int a, int b, int stride, int round, const char *what)
{
    const int prev = (rank + size - 1) % size;
    for (int i = a; i < b; i++)
        if (r[i * stride] != val(prev, round, i)) {
            FAIL("partitioned %s, round %d: element %d is %d, want %d", what, round, i, r[i * stride], val(prev, round, i));
            return 0;
        }
    for (int i = a * stride; i < b * stride; i++)
        if (r[i] != ref[i]) {
            FAIL("partitioned %s, round %d: int %d is %d, PMPI on host copies %d", what, round, i, r[i], ref[i]);
            return 0;
        }
    return 1;
}

/* the reference: the same message (PARTS * PCNT elements of t) through PMPI_Sendrecv on host copies.
 * (Not a partitioned exchange: Open MPI 5.0.11 mismatches partitioned requests made while another
 * pair's first activation is under way at 3 ranks, and loses data of a datatype with gaps split in
 * several partitions, on host buffers, without ncclmpi) */
static void part_ref(int *hs, int *hr, int stride, MPI_Datatype t, int tag, MPI_Comm c, int round)
{
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int i = 0; i < N; i++) hs[i] = -9, hr[i] = -5;
    for (int p = 0; p < PARTS; p++) part_fill(hs, p, stride, round);
    PMPI_Sendrecv(hs, PARTS * PCNT, t, next, tag, hr, PARTS * PCNT, t, prev, tag, c, MPI_STATUS_IGNORE);
}

/* case k (one pair of requests a process: Open MPI 5.0.11 mismatches the first activation of a
 * partitioned pair made after another pair, on host buffers without ncclmpi; MPI4_PART_CASE) */
static void t_partitioned(MPI_Comm c, int **dev, int **host, int k)
{
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const unsigned long long staged0 = route_calls("Psend_init", NCCLMPI_ROUTE_STAGED) + route_calls("Precv_init", NCCLMPI_ROUTE_STAGED);
    MPI_Datatype gap;  /* an int and a gap of one int */
    MPI_Type_create_resized(MPI_INT, 0, 2 * (MPI_Aint)sizeof(int), &gap);
    MPI_Type_commit(&gap);
    int device_inits = 0;
    /* case: bit 0 the send buffer on the device, bit 1 the receive buffer; 4: both, the datatype
     * with gaps on both sides, one partition each (as far as Open MPI 5.0.11 takes it, above); 5:
     * both, the receiver in half as many partitions as the sender */
    {
        const int mask = k >= 4 ? 3 : k, stride = k == 4 ? 2 : 1;
        const int sparts = k == 4 ? 1 : PARTS, rparts = k == 4 ? 1 : k == 5 ? PARTS / 2 : PARTS;
        const MPI_Datatype t = k == 4 ? gap : MPI_INT;
        int *s = pick(dev, host, mask, 0), *r = pick(dev, host, mask, 1);
        char what[64];
        snprintf(what, sizeof(what), "%s to %s%s", mask & 1 ? "device" : "host", mask & 2 ? "device" : "host",
                 k == 4 ? ", with gaps" : k == 5 ? ", other partitions" : "");
        device_inits += (mask & 1) + (mask >> 1);
        MPI_Request q[2];
        int rc = MPI_Psend_init(s, sparts, (MPI_Count)(PARTS * PCNT / sparts), t, next, 21 + k, c, MPI_INFO_NULL, &q[0]);
        int rc2 = MPI_Precv_init(r, rparts, (MPI_Count)(PARTS * PCNT / rparts), t, prev, 21 + k, c, MPI_INFO_NULL, &q[1]);
        if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS) {
            FAIL("partitioned %s: MPI_Psend_init %d, MPI_Precv_init %d", what, rc, rc2);
            MPI_Type_free(&gap);
            return;
        }
        for (int round = 0; round < 3; round++) {
            static int hs[N], ref[N];
            part_ref(hs, ref, stride, t, 41 + k, c, round);
            for (int i = 0; i < N; i++) s[i] = -9, r[i] = -5;  /* (the gaps of r: -5 stays) */
            if (MPI_Startall(2, q) != MPI_SUCCESS) FAIL("partitioned %s: MPI_Startall failed", what);
            if (sparts == 1) {
                for (int p = 0; p < PARTS; p++) part_fill(s, p, stride, round);
                rc = MPI_Pready(0, q[0]);
            } else {
                static const int list[2] = {5, 3};
                part_fill(s, 5, stride, round), part_fill(s, 3, stride, round);
                rc = MPI_Pready_list(2, (int *)list, q[0]);
                part_fill(s, 0, stride, round);
                if (rc == MPI_SUCCESS) rc = MPI_Pready(0, q[0]);
                part_fill(s, 1, stride, round), part_fill(s, 2, stride, round);
                if (rc == MPI_SUCCESS) rc = MPI_Pready_range(1, 2, q[0]);
                part_fill(s, 4, stride, round), part_fill(s, 6, stride, round), part_fill(s, 7, stride, round);
                if (rc == MPI_SUCCESS) rc = MPI_Pready(4, q[0]);
                if (rc == MPI_SUCCESS) rc = MPI_Pready_range(6, 7, q[0]);
            }
            if (rc != MPI_SUCCESS) FAIL("partitioned %s: MPI_Pready* failed (%d)", what, rc);
            /* each partition on the device as soon as MPI_Parrived reports it */
            const int per = PARTS * PCNT / rparts;
            int seen[PARTS] = {0}, left = rparts;
            const double t0 = MPI_Wtime();
            while (left && MPI_Wtime() - t0 < 20)
                for (int p = 0; p < rparts; p++) {
                    int flag = 0;
                    if (seen[p]) continue;
                    if (MPI_Parrived(q[1], p, &flag) != MPI_SUCCESS) {
                        FAIL("partitioned %s: MPI_Parrived failed", what);
                        left = 0;
                        break;
                    }
                    if (!flag) continue;
                    seen[p] = 1, left--;
                    char at[96];
                    snprintf(at, sizeof(at), "%s, partition %d at MPI_Parrived", what, p);
                    /* (not where the receiver's partitions are coarser: Open MPI 5.0.11's
                     * MPI_Parrived reports such a partition before all of it landed, host
                     * buffers and no ncclmpi too; the completion is checked below) */
                    if (rparts == sparts) part_check(r, ref, p * per, (p + 1) * per, stride, round, at);
                }
            if (left) FAIL("partitioned %s, round %d: %d partition(s) never arrived", what, round, left);
            MPI_Status st[2];
            if (round == 1) {  /* completed by MPI_Test */
                for (int j = 0; j < 2; j++) {
                    int flag = 0;
                    while (!flag && MPI_Test(&q[j], &flag, &st[j]) == MPI_SUCCESS) {}
                }
            } else if (MPI_Waitall(2, q, st) != MPI_SUCCESS) {
                FAIL("partitioned %s: MPI_Waitall failed", what);
            }
            part_check(r, ref, 0, PARTS * PCNT, stride, round, what);
            for (int i = stride * PARTS * PCNT; i < N; i++)  /* (past the data; the gaps: part_check) */
                if (r[i] != -5) {
                    FAIL("partitioned %s, round %d: int %d past the data was written (%d)", what, round, i, r[i]);
                    break;
                }
        }
        MPI_Request_free(&q[0]);
        MPI_Request_free(&q[1]);
    }
    MPI_Type_free(&gap);
    const unsigned long long staged =
        route_calls("Psend_init", NCCLMPI_ROUTE_STAGED) + route_calls("Precv_init", NCCLMPI_ROUTE_STAGED) - staged0;
    if (staged != (unsigned long long)device_inits)
        FAIL("partitioned: %llu inits on the staged route, want %d (one per device buffer)", staged, device_inits);
}

/* ---- persistent collectives on device buffers: each start runs the nonblocking form ---- */
enum { K = 3, ROUNDS = 4 };
enum { P_ALLREDUCE, P_REDUCE, P_BCAST, P_ALLGATHER, P_ALLGATHERV, P_ALLTOALL, P_REDUCE_SCATTER, P_RSB, P_GATHER,
       P_SCATTER, P_SCAN, P_EXSCAN, P_GATHERV, P_SCATTERV, P_ALLTOALLV, P_ALLTOALLW, P_COUNT };
static const char *const p_names[P_COUNT] = {"Allreduce_init", "Reduce_init", "Bcast_init", "Allgather_init",
    "Allgatherv_init", "Alltoall_init", "Reduce_scatter_init", "Reduce_scatter_block_init", "Gather_init",
    "Scatter_init", "Scan_init", "Exscan_init", "Gatherv_init", "Scatterv_init", "Alltoallv_init", "Alltoallw_init"};
/* per-rank counts (the last rank's 0: a rank without data in the v/w forms) and displacements;
 * Alltoallv/w: rank i sends p_cnts[j] ints to rank j, so it receives p_cnts[i] from each rank
 * (a_rc, a_rd), displacements in bytes for Alltoallw (a_sb, a_rb), MPI_INT throughout (a_ty) */
static int p_cnts[64], p_dsp[64], a_rc[64], a_rd[64], a_sb[64], a_rb[64];
static MPI_Datatype a_ty[64];

/* The persistent call's count and displacement arrays: copies that are poisoned and freed once the
 * _init returned, as mpi4py's large-count forms do (the MPI library reads them at the _init) */
static int *p_tmp(const int *a)
{
    int *t = malloc(sizeof(int) * (size_t)size);
    if (!t) MPI_Abort(MPI_COMM_WORLD, 2);
    memcpy(t, a, sizeof(int) * (size_t)size);
    return t;
}
static int p_tmp_done(int rc, int *a, int *b)
{
    for (int i = 0; i < size; i++) a[i] = b ? (b[i] = -7777777) : -7777777;
    free(a);
    free(b);
    return rc;
}

/* the persistent call of kind k (root 1 % size), or PMPI's blocking form of it (ref) */
static int p_call(int k, const int *s, int *r, MPI_Datatype t2, MPI_Comm c, MPI_Request *q, int ref)
{
    const int root = 1 % size;
    const MPI_Info I = MPI_INFO_NULL;
    int *tc = ref ? NULL : p_tmp(p_cnts), *td = ref ? NULL : p_tmp(p_dsp);
    if (!ref && k == P_ALLGATHERV)
        return p_tmp_done(MPI_Allgatherv_init(s, p_cnts[rank], MPI_INT, r, tc, td, MPI_INT, c, I, q), tc, td);
    if (!ref && k == P_REDUCE_SCATTER)
        return p_tmp_done(MPI_Reduce_scatter_init(s, r, tc, MPI_INT, MPI_SUM, c, I, q), tc, td);
    if (!ref && k == P_GATHERV)
        return p_tmp_done(MPI_Gatherv_init(s, p_cnts[rank], MPI_INT, r, tc, td, MPI_INT, root, c, I, q), tc, td);
    if (!ref && k == P_SCATTERV)
        return p_tmp_done(MPI_Scatterv_init(s, tc, td, MPI_INT, r, p_cnts[rank], MPI_INT, root, c, I, q), tc, td);
    if (!ref && (k == P_ALLTOALLV || k == P_ALLTOALLW)) {
        int *rc2 = p_tmp(a_rc), *rd2 = p_tmp(k == P_ALLTOALLV ? a_rd : a_rb), *sd2 = p_tmp(a_sb);
        MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * (size_t)size);
        for (int i = 0; i < size; i++) ty[i] = a_ty[i];
        int e = k == P_ALLTOALLV ? MPI_Alltoallv_init(s, tc, td, MPI_INT, r, rc2, rd2, MPI_INT, c, I, q)
                                 : MPI_Alltoallw_init(s, tc, sd2, ty, r, rc2, rd2, ty, c, I, q);
        for (int i = 0; i < size; i++) ty[i] = MPI_DATATYPE_NULL;
        free(ty);
        p_tmp_done(0, sd2, NULL);
        return p_tmp_done(p_tmp_done(e, rc2, rd2), tc, td);
    }
    if (!ref) p_tmp_done(0, tc, td);
    switch (k) {
    case P_GATHERV: return PMPI_Gatherv(s, p_cnts[rank], MPI_INT, r, p_cnts, p_dsp, MPI_INT, root, c);
    case P_SCATTERV: return PMPI_Scatterv(s, p_cnts, p_dsp, MPI_INT, r, p_cnts[rank], MPI_INT, root, c);
    case P_ALLTOALLV: return PMPI_Alltoallv(s, p_cnts, p_dsp, MPI_INT, r, a_rc, a_rd, MPI_INT, c);
    case P_ALLTOALLW: return PMPI_Alltoallw(s, p_cnts, a_sb, a_ty, r, a_rc, a_rb, a_ty, c);
    case P_ALLREDUCE: return ref ? PMPI_Allreduce(s, r, K, MPI_INT, MPI_SUM, c) : MPI_Allreduce_init(s, r, K, MPI_INT, MPI_SUM, c, I, q);
    case P_REDUCE: return ref ? PMPI_Reduce(s, r, K, MPI_INT, MPI_SUM, root, c) : MPI_Reduce_init(s, r, K, MPI_INT, MPI_SUM, root, c, I, q);
    case P_BCAST: return ref ? PMPI_Bcast(r, K, MPI_INT, root, c) : MPI_Bcast_init(r, K, MPI_INT, root, c, I, q);
    /* (a derived type: the application frees it after the init) */
    case P_ALLGATHER: return ref ? PMPI_Allgather(s, 1, t2, r, 1, t2, c) : MPI_Allgather_init(s, 1, t2, r, 1, t2, c, I, q);
    case P_ALLGATHERV:
        return ref ? PMPI_Allgatherv(s, p_cnts[rank], MPI_INT, r, p_cnts, p_dsp, MPI_INT, c)
                   : MPI_Allgatherv_init(s, p_cnts[rank], MPI_INT, r, p_cnts, p_dsp, MPI_INT, c, I, q);
    case P_ALLTOALL: return ref ? PMPI_Alltoall(s, K, MPI_INT, r, K, MPI_INT, c) : MPI_Alltoall_init(s, K, MPI_INT, r, K, MPI_INT, c, I, q);
    case P_REDUCE_SCATTER:
        return ref ? PMPI_Reduce_scatter(s, r, p_cnts, MPI_INT, MPI_SUM, c) : MPI_Reduce_scatter_init(s, r, p_cnts, MPI_INT, MPI_SUM, c, I, q);
    case P_RSB:
        return ref ? PMPI_Reduce_scatter_block(s, r, K, MPI_INT, MPI_SUM, c) : MPI_Reduce_scatter_block_init(s, r, K, MPI_INT, MPI_SUM, c, I, q);
    case P_GATHER: return ref ? PMPI_Gather(s, K, MPI_INT, r, K, MPI_INT, root, c) : MPI_Gather_init(s, K, MPI_INT, r, K, MPI_INT, root, c, I, q);
    case P_SCATTER: return ref ? PMPI_Scatter(s, K, MPI_INT, r, K, MPI_INT, root, c) : MPI_Scatter_init(s, K, MPI_INT, r, K, MPI_INT, root, c, I, q);
    case P_SCAN: return ref ? PMPI_Scan(s, r, K, MPI_INT, MPI_SUM, c) : MPI_Scan_init(s, r, K, MPI_INT, MPI_SUM, c, I, q);
    default: return ref ? PMPI_Exscan(s, r, K, MPI_INT, MPI_SUM, c) : MPI_Exscan_init(s, r, K, MPI_INT, MPI_SUM, c, I, q);
    }
}

/* the elements of r the call defines on this rank */
static int p_out(int k)
{
    const int root = 1 % size;
    switch (k) {
    case P_REDUCE: case P_GATHER: return rank == root ? (k == P_REDUCE ? K : K * size) : 0;
    case P_ALLGATHER: return 2 * size;
    case P_ALLGATHERV: return p_dsp[size - 1] + p_cnts[size - 1];
    case P_ALLTOALL: return K * size;
    case P_REDUCE_SCATTER: case P_SCATTERV: return p_cnts[rank];
    case P_GATHERV: return rank == root ? p_dsp[size - 1] + p_cnts[size - 1] : 0;
    case P_ALLTOALLV: case P_ALLTOALLW: return size * p_cnts[rank];
    case P_EXSCAN: return rank == 0 ? 0 : K;
    default: return K;
    }
}

/* round `round`'s data: s (device) and hs (its host copy) from val(), r and ref poisoned (a
 * broadcast's buffer holds the root's data there) */
static void p_fill(int k, int round, int *s, int *hs, int *r, int *ref)
{
    for (int i = 0; i < N; i++) hs[i] = s[i] = val(rank, round, i), r[i] = ref[i] = -7;
    if (k == P_BCAST && rank == 1 % size)
        for (int i = 0; i < K; i++) r[i] = ref[i] = val(rank, round, i);
}

/* completes q, started: by form 0 MPI_Wait, 1 an MPI_Test loop, 2 MPI_Waitall, 3
 * MPI_Request_get_status until complete, then MPI_Wait (r must be complete by then) */
static int p_complete(MPI_Request *q, int form)
{
    int flag = 0, rc = MPI_SUCCESS;
    MPI_Status st;
    switch (form) {
    case 0: return MPI_Wait(q, &st);
    case 1:
        while (!flag && rc == MPI_SUCCESS) rc = MPI_Test(q, &flag, &st);
        return rc;
    case 2: return MPI_Waitall(1, q, MPI_STATUSES_IGNORE);
    default:
        while (!flag && rc == MPI_SUCCESS) rc = MPI_Request_get_status(*q, &flag, &st);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(q, &st);
    }
}

static void t_persistent(MPI_Comm c, int *s, int *r)
{
    static int hs[N], ref[N];
    if (size > 64) return;
    for (int i = 0; i < size; i++) {
        p_cnts[i] = size > 1 && i == size - 1 ? 0 : 1 + i % 3, p_dsp[i] = i ? p_dsp[i - 1] + p_cnts[i - 1] : 0;
        a_sb[i] = p_dsp[i] * (int)sizeof(int), a_ty[i] = MPI_INT;
    }
    for (int i = 0; i < size; i++) a_rc[i] = p_cnts[rank], a_rd[i] = i * p_cnts[rank], a_rb[i] = a_rd[i] * (int)sizeof(int);
    unsigned long long nb0 = route_calls("Iallreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Iallreduce", NCCLMPI_ROUTE_STAGED) +
                             route_calls("Iallreduce", NCCLMPI_ROUTE_ONESHOT);
    unsigned long long nccl0 = route_calls("Iallreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Iallreduce", NCCLMPI_ROUTE_ONESHOT);
    for (int k = 0; k < P_COUNT; k++) {
        MPI_Datatype t2;
        MPI_Type_contiguous(2, MPI_INT, &t2);
        MPI_Type_commit(&t2);
        MPI_Request q;
        memset(&q, 0xA5, sizeof(q));
        p_fill(k, 0, s, hs, r, ref);
        int rc = p_call(k, s, r, t2, c, &q, 0);
        MPI_Type_free(&t2);  /* (the request keeps what it needs) */
        if (rc != MPI_SUCCESS || q == MPI_REQUEST_NULL) {
            FAIL("MPI_%s on device buffers: rc %d", p_names[k], rc);
            continue;
        }
        for (int round = 0; round < ROUNDS; round++) {
            p_fill(k, round, s, hs, r, ref);
            rc = round % 4 == 2 ? MPI_Startall(1, &q) : MPI_Start(&q);
            if (rc == MPI_SUCCESS) rc = p_complete(&q, round % 4);
            MPI_Datatype h2;
            PMPI_Type_contiguous(2, MPI_INT, &h2);
            PMPI_Type_commit(&h2);
            p_call(k, hs, ref, h2, c, NULL, 1);
            PMPI_Type_free(&h2);
            const int n = p_out(k);
            if (rc != MPI_SUCCESS || q == MPI_REQUEST_NULL) FAIL("MPI_%s, round %d: start/complete rc %d", p_names[k], round, rc);
            for (int i = 0; i < n; i++)
                if (r[i] != ref[i]) {
                    FAIL("MPI_%s on device buffers, round %d (form %d): element %d is %d, PMPI %d", p_names[k], round,
                         round % 4, i, r[i], ref[i]);
                    break;
                }
            for (int i = n; i < N && k != P_BCAST && k != P_EXSCAN; i++)
                if (r[i] != -7) {
                    FAIL("MPI_%s, round %d: element %d past the output written (%d)", p_names[k], round, i, r[i]);
                    break;
                }
        }
        MPI_Request_free(&q);
        if (q != MPI_REQUEST_NULL) FAIL("MPI_Request_free left the request of MPI_%s", p_names[k]);
        if (route_calls(p_names[k], NCCLMPI_ROUTE_STAGED) != 1 || route_calls(p_names[k], NCCLMPI_ROUTE_ERROR) != 0)
            FAIL("MPI_%s on device buffers: not one init on its restarted route (%llu)", p_names[k],
                 route_calls(p_names[k], NCCLMPI_ROUTE_STAGED));
    }
    /* two persistent collectives in one MPI_Startall, completed by one MPI_Waitall */
    int *s2 = s + N / 2, *r2 = r + N / 2;
    MPI_Request qs[2];
    MPI_Allreduce_init(s, r, K, MPI_INT, MPI_MAX, c, MPI_INFO_NULL, &qs[0]);
    MPI_Allreduce_init(s2, r2, K, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &qs[1]);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) hs[i] = s[i] = val(rank, round + 9, i), r[i] = -7;
        int rc = MPI_Startall(2, qs);
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, qs, MPI_STATUSES_IGNORE);
        int want[2][K];
        PMPI_Allreduce(hs, want[0], K, MPI_INT, MPI_MAX, c);
        PMPI_Allreduce(hs + N / 2, want[1], K, MPI_INT, MPI_SUM, c);
        if (rc != MPI_SUCCESS || memcmp(r, want[0], sizeof(want[0])) || memcmp(r2, want[1], sizeof(want[1])))
            FAIL("two persistent allreduces in one MPI_Startall, round %d: rc %d, %d %d (PMPI %d %d)", round, rc, r[0], r2[0],
                 want[0][0], want[1][0]);
    }
    MPI_Request_free(&qs[0]);
    MPI_Request_free(&qs[1]);
    const unsigned long long nb = route_calls("Iallreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Iallreduce", NCCLMPI_ROUTE_STAGED) +
                                  route_calls("Iallreduce", NCCLMPI_ROUTE_ONESHOT) - nb0;
    const unsigned long long nccl = route_calls("Iallreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Iallreduce", NCCLMPI_ROUTE_ONESHOT) - nccl0;
    if (nb != ROUNDS * 3) FAIL("the persistent allreduces' starts: %llu device MPI_Iallreduce calls, want %d", nb, ROUNDS * 3);
    const char *e = getenv("MPI4_EXPECT_NCCL");
    if (e && *e == '1' && nccl != nb) FAIL("the persistent allreduces' starts: %llu of %llu on NCCL", nccl, nb);
}

#if NM_BUILD_HAVE_MPI_LARGE
/* the calls of fn ncclmpi counted, and those of them that went to the real MPI (host) */
static void calls_host(const char *fn, unsigned long long *calls, unsigned long long *host)
{
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    ncclmpi_stats_t st;
    *calls = *host = 0;
    if (get && get(fn, &st) == 0) *calls = st.calls, *host = st.route[NCCLMPI_ROUTE_HOST];
}

/* device buffers: MPI_<fn>_c made `made` calls that must all be MPI_<fn>'s on a device route */
#define ROUTED(fn, made, c0, h0, cc0)                                                                    \
    do {                                                                                               \
        unsigned long long c1, h1, cc1, hc1;                                                           \
        calls_host(#fn, &c1, &h1);                                                                     \
        calls_host(#fn "_c", &cc1, &hc1);                                                              \
        if (c1 - c0 != (made) || h1 != h0 || cc1 != cc0)                                               \
            FAIL("MPI_" #fn "_c on device buffers: MPI_" #fn " counted %llu calls (want %d), %llu to the " \
                 "host (want 0); MPI_" #fn "_c %llu (want 0)", c1 - c0, (made), h1 - h0, cc1 - cc0);     \
    } while (0)
#define BEFORE(fn) unsigned long long fn##_c0, fn##_h0, fn##_cc0, fn##_hc0; calls_host(#fn, &fn##_c0, &fn##_h0); \
    calls_host(#fn "_c", &fn##_cc0, &fn##_hc0)
#define AFTER(fn, made) ROUTED(fn, made, fn##_c0, fn##_h0, fn##_cc0)

static void expect_class(const char *call, int rc, int want, const int *out, int n)
{
    int cls = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING] = "";
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    if (rc == MPI_SUCCESS || cls != want || !strstr(msg, call))
        FAIL("%s: rc %d, class %d (want %d), message '%s'", call, rc, cls, want, msg);
    for (int i = 0; out && i < n; i++)
        if (out[i] != -3) {
            FAIL("%s: the output was written (element %d is %d)", call, i, out[i]);
            break;
        }
}

static void t_large(MPI_Comm c, int **dev)
{
    static int hs[N], ref[N], hr[N];
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size, M = N / size;
    const MPI_Count BIG = (MPI_Count)INT_MAX + 1;
    int *s = dev[0], *r = dev[1];
    MPI_Request q;
    int rc;
    /* MPI_Allreduce_c, MPI_Iallreduce_c */
    BEFORE(Allreduce);
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 1, i), r[i] = -3;
    rc = MPI_Allreduce_c(s, r, (MPI_Count)N, MPI_INT, MPI_SUM, c);
    PMPI_Allreduce(hs, ref, N, MPI_INT, MPI_SUM, c);
    if (rc != MPI_SUCCESS || memcmp(r, ref, sizeof(ref))) FAIL("MPI_Allreduce_c: rc %d, element 0 %d (PMPI %d)", rc, r[0], ref[0]);
    AFTER(Allreduce, 1);
    BEFORE(Iallreduce);
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 2, i), r[i] = -3;
    rc = MPI_Iallreduce_c(s, r, (MPI_Count)N, MPI_INT, MPI_MAX, c, &q);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    PMPI_Allreduce(hs, ref, N, MPI_INT, MPI_MAX, c);
    if (rc != MPI_SUCCESS || memcmp(r, ref, sizeof(ref))) FAIL("MPI_Iallreduce_c: rc %d, element 0 %d (PMPI %d)", rc, r[0], ref[0]);
    AFTER(Iallreduce, 1);
    /* MPI_Bcast_c from the last rank */
    BEFORE(Bcast);
    for (int i = 0; i < N; i++) r[i] = ref[i] = rank == size - 1 ? val(rank, 3, i) : -3;
    rc = MPI_Bcast_c(r, (MPI_Count)N, MPI_INT, size - 1, c);
    PMPI_Bcast(ref, N, MPI_INT, size - 1, c);
    if (rc != MPI_SUCCESS || memcmp(r, ref, sizeof(ref))) FAIL("MPI_Bcast_c: rc %d, element 0 %d (PMPI %d)", rc, r[0], ref[0]);
    AFTER(Bcast, 1);
    /* MPI_Allgather_c: M elements from each rank */
    BEFORE(Allgather);
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 4, i), r[i] = ref[i] = -3;
    rc = MPI_Allgather_c(s, (MPI_Count)M, MPI_INT, r, (MPI_Count)M, MPI_INT, c);
    PMPI_Allgather(hs, M, MPI_INT, ref, M, MPI_INT, c);
    if (rc != MPI_SUCCESS || memcmp(r, ref, sizeof(ref))) FAIL("MPI_Allgather_c: rc %d, element 0 %d (PMPI %d)", rc, r[0], ref[0]);
    AFTER(Allgather, 1);
    /* MPI_Isend_c + MPI_Recv_c, MPI_Irecv_c + MPI_Send_c around the ring */
    BEFORE(Isend);
    BEFORE(Recv);
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 5, i), r[i] = -3;
    MPI_Status st;
    rc = MPI_Isend_c(s, (MPI_Count)N, MPI_INT, next, 11, c, &q);
    int rc2 = MPI_Recv_c(r, (MPI_Count)N, MPI_INT, prev, 11, c, &st);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    PMPI_Sendrecv(hs, N, MPI_INT, next, 12, ref, N, MPI_INT, prev, 12, c, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS || memcmp(r, ref, sizeof(ref)) || st.MPI_SOURCE != prev || st.MPI_TAG != 11)
        FAIL("MPI_Isend_c/MPI_Recv_c: rc %d/%d, source %d, tag %d, element 0 %d (PMPI %d)", rc, rc2, st.MPI_SOURCE,
             st.MPI_TAG, r[0], ref[0]);
    AFTER(Isend, 1);
    AFTER(Recv, 1);
    BEFORE(Irecv);
    BEFORE(Send);
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 6, i), r[i] = -3;
    rc = MPI_Irecv_c(r, (MPI_Count)N, MPI_INT, prev, 13, c, &q);
    rc2 = MPI_Send_c(s, (MPI_Count)N, MPI_INT, next, 13, c);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    PMPI_Sendrecv(hs, N, MPI_INT, next, 14, ref, N, MPI_INT, prev, 14, c, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS || memcmp(r, ref, sizeof(ref)))
        FAIL("MPI_Irecv_c/MPI_Send_c: rc %d/%d, element 0 %d (PMPI %d)", rc, rc2, r[0], ref[0]);
    AFTER(Irecv, 1);
    AFTER(Send, 1);
    /* MPI_Alltoallv_c: device buffers refused (MPI_ERR_BUFFER), host buffers right */
    MPI_Count cnt[64];
    MPI_Aint dsp[64];
    int icnt[64], idsp[64];
    for (int i = 0; i < size; i++) cnt[i] = icnt[i] = M, dsp[i] = idsp[i] = i * M;
    for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, 7, i), r[i] = -3;
    rc = MPI_Alltoallv_c(s, cnt, dsp, MPI_INT, r, cnt, dsp, MPI_INT, c);
    expect_class("MPI_Alltoallv_c", rc, MPI_ERR_BUFFER, r, N);
    for (int i = 0; i < N; i++) hr[i] = ref[i] = -3;
    rc = MPI_Alltoallv_c(hs, cnt, dsp, MPI_INT, hr, cnt, dsp, MPI_INT, c);
    PMPI_Alltoallv(hs, icnt, idsp, MPI_INT, ref, icnt, idsp, MPI_INT, c);
    if (rc != MPI_SUCCESS || memcmp(hr, ref, sizeof(ref))) FAIL("MPI_Alltoallv_c on host buffers: rc %d, element 0 %d (PMPI %d)", rc, hr[0], ref[0]);
    /* a count above INT_MAX on a device buffer: MPI_ERR_COUNT before anything is touched (the
     * buffers hold N elements: the real MPI would read far past them) */
    unsigned long long e0, h0, e1, h1;
    calls_host("Allreduce_c", &e0, &h0);
    for (int i = 0; i < N; i++) r[i] = -3;
    rc = MPI_Allreduce_c(s, r, BIG, MPI_INT, MPI_SUM, c);
    expect_class("MPI_Allreduce_c", rc, MPI_ERR_COUNT, r, N);
    calls_host("Allreduce_c", &e1, &h1);
    if (e1 - e0 != 1 || h1 != h0 || route_calls("Allreduce_c", NCCLMPI_ROUTE_ERROR) < 1)
        FAIL("MPI_Allreduce_c above INT_MAX: %llu calls, %llu to the host, %llu errors", e1 - e0, h1 - h0,
             route_calls("Allreduce_c", NCCLMPI_ROUTE_ERROR));
    memset(&q, 0xA5, sizeof(q));
    rc = MPI_Isend_c(s, BIG, MPI_INT, next, 15, c, &q);
    expect_class("MPI_Isend_c", rc, MPI_ERR_COUNT, NULL, 0);
    if (q != MPI_REQUEST_NULL) FAIL("MPI_Isend_c above INT_MAX: the request is not MPI_REQUEST_NULL");
    rc = MPI_Recv_c(r, BIG, MPI_INT, prev, 15, c, MPI_STATUS_IGNORE);
    expect_class("MPI_Recv_c", rc, MPI_ERR_COUNT, r, N);
    /* host buffers above INT_MAX: the real MPI's _c call (a zero-size datatype: nothing moves) */
    MPI_Datatype t0;
    MPI_Type_contiguous(0, MPI_INT, &t0);
    MPI_Type_commit(&t0);
    calls_host("Bcast_c", &e0, &h0);
    rc = MPI_Bcast_c(hr, BIG, t0, 0, c);
    calls_host("Bcast_c", &e1, &h1);
    if (rc != MPI_SUCCESS || e1 - e0 != 1 || h1 - h0 != 1)
        FAIL("MPI_Bcast_c above INT_MAX on a host buffer: rc %d, %llu calls, %llu to the host", rc, e1 - e0, h1 - h0);
    MPI_Type_free(&t0);
}
#endif

#if NM_BUILD_HAVE_MPI41
/* MPI-4.1's MPI_Request_get_status_any/all/some on two persistent receives into device buffers:
 * a receive they report complete holds its data on the device when they return, before the
 * MPI_Waitall that completes it */
static int gs_check(const int *r, int round, int i0, const char *what)
{
    const int prev = (rank + size - 1) % size;
    for (int i = 0; i < N; i++)
        if (r[i] != val(prev, round, i)) {
            FAIL("%s: receive %d, element %d is %d, want %d", what, i0, i, r[i], val(prev, round, i));
            return 0;
        }
    return 1;
}

/* the status MPI_Waitall gives after the status call of `form` found a persistent receive of
 * host memory complete, through PMPI: MPICH 5.0.2 gives an empty one there (source
 * MPI_ANY_SOURCE), as it does after MPI_Request_get_status; the staged receives are the real
 * MPI's own requests and inherit it */
static MPI_Status gs_ref(MPI_Comm c, int form)
{
    static int hr[N], hs[N];
    MPI_Request q, sq;
    MPI_Status st;
    PMPI_Recv_init(hr, N, MPI_INT, rank, 62, c, &q);
    PMPI_Start(&q);
    PMPI_Isend(hs, N, MPI_INT, rank, 62, c, &sq);
    int flag = 0, idx, outc, ind;
    while (!flag) {
        if (form == 0) PMPI_Request_get_status_any(1, &q, &idx, &flag, &st);
        else if (form == 1) PMPI_Request_get_status_all(1, &q, &flag, &st);
        else PMPI_Request_get_status_some(1, &q, &outc, &ind, &st), flag = outc == 1;
    }
    PMPI_Wait(&q, &st);
    PMPI_Wait(&sq, MPI_STATUS_IGNORE);
    PMPI_Request_free(&q);
    return st;
}

static void t_get_status41(MPI_Comm c, int **dev)
{
    static const char *const names[3] = {"MPI_Request_get_status_any", "MPI_Request_get_status_all",
                                         "MPI_Request_get_status_some"};
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int *r[2] = {dev[1], dev[2]};
    static int hs[2][N];
    for (int form = 0; form < 3; form++) {
        MPI_Request q[2], qq[2], sq[2];
        MPI_Recv_init(r[0], N, MPI_INT, prev, 60, c, &q[0]);
        MPI_Recv_init(r[1], N, MPI_INT, prev, 61, c, &q[1]);
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < N; i++) r[k][i] = -4, hs[k][i] = val(rank, 10 * k + form, i);
        MPI_Startall(2, q);
        MPI_Isend(hs[0], N, MPI_INT, next, 60, c, &sq[0]);
        MPI_Isend(hs[1], N, MPI_INT, next, 61, c, &sq[1]);
        qq[0] = q[0], qq[1] = q[1];  /* (a request already checked: null here) */
        int left = 2, rc = MPI_SUCCESS;
        const double t0 = MPI_Wtime();
        while (left && rc == MPI_SUCCESS && MPI_Wtime() - t0 < 20) {
            int flag = 0, idx = MPI_UNDEFINED, outc = 0, ind[2];
            MPI_Status st[2];
            if (form == 0) {
                rc = MPI_Request_get_status_any(2, qq, &idx, &flag, &st[0]);
                if (rc == MPI_SUCCESS && flag && idx >= 0 && idx < 2) {
                    gs_check(r[idx], 10 * idx + form, idx, names[form]);
                    qq[idx] = MPI_REQUEST_NULL, left--;
                }
            } else if (form == 1) {
                rc = MPI_Request_get_status_all(2, qq, &flag, st);
                if (rc == MPI_SUCCESS && flag) {
                    for (int k = 0; k < 2; k++) gs_check(r[k], 10 * k + form, k, names[form]);
                    left = 0;
                }
            } else {
                rc = MPI_Request_get_status_some(2, qq, &outc, ind, st);
                for (int j = 0; rc == MPI_SUCCESS && outc != MPI_UNDEFINED && j < outc; j++) {
                    gs_check(r[ind[j]], 10 * ind[j] + form, ind[j], names[form]);
                    qq[ind[j]] = MPI_REQUEST_NULL, left--;
                }
            }
        }
        if (rc != MPI_SUCCESS || left) FAIL("%s: rc %d, %d receive(s) never reported complete", names[form], rc, left);
        MPI_Status st[2], ref = gs_ref(c, form);
        if (MPI_Waitall(2, q, st) != MPI_SUCCESS) FAIL("%s: MPI_Waitall failed", names[form]);
        for (int k = 0; k < 2; k++) {
            int cnt = -1, rcnt = -1;
            MPI_Get_count(&st[k], MPI_INT, &cnt);
            PMPI_Get_count(&ref, MPI_INT, &rcnt);
            const int as_mpi = ref.MPI_SOURCE != rank && st[k].MPI_SOURCE == ref.MPI_SOURCE && st[k].MPI_TAG == ref.MPI_TAG && cnt == rcnt;
            if (!as_mpi && (st[k].MPI_SOURCE != prev || st[k].MPI_TAG != 60 + k || cnt != N))
                FAIL("%s: MPI_Waitall's status %d: source %d, tag %d, count %d", names[form], k, st[k].MPI_SOURCE,
                     st[k].MPI_TAG, cnt);
            gs_check(r[k], 10 * k + form, k, "after MPI_Waitall");
        }
        MPI_Waitall(2, sq, MPI_STATUSES_IGNORE);
        MPI_Request_free(&q[0]);
        MPI_Request_free(&q[1]);
    }
}
#endif

/* the same process, host buffers: a persistent collective works (three starts) */
static void t_host_persistent(MPI_Comm c)
{
    static int s[N], r[N], ref[N];
    MPI_Request q = MPI_REQUEST_NULL;
    if (MPI_Allreduce_init(s, r, N, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &q) != MPI_SUCCESS) {
        FAIL("MPI_Allreduce_init on host buffers failed");
        return;
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) s[i] = val(rank, round, i), r[i] = -1;
        if (MPI_Start(&q) != MPI_SUCCESS || MPI_Wait(&q, MPI_STATUS_IGNORE) != MPI_SUCCESS) FAIL("start/wait failed");
        PMPI_Allreduce(s, ref, N, MPI_INT, MPI_SUM, c);
        if (memcmp(r, ref, sizeof(r))) FAIL("MPI_Allreduce_init on host buffers, round %d: %d, PMPI %d", round, r[0], ref[0]);
    }
    MPI_Request_free(&q);
}

int main(int argc, char **argv)
{
    stand_in_mpi_init(&argc, &argv, "MPI4_DEVICE_THREADS", &rank, &size);
    CUdeviceptr b[NBUF];
    if (!stand_in_driver("mpi4_device_prog", NBUF, N * sizeof(int), b)) {
        MPI_Finalize();
        return 77;
    }
    static int hb[3][N];
    int *dev[3] = {(int *)(uintptr_t)b[0], (int *)(uintptr_t)b[1], (int *)(uintptr_t)b[2]};
    int *host[3] = {hb[0], hb[1], hb[2]};
    MPI_Comm c, ring;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(c, 1, dims, periods, 0, &ring);
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    /* partitioned communication: case MPI4_PART_CASE (0-5, default 3: device to device); with
     * MPI4_ONLY=part nothing else, with MPI4_ONLY=status41 only MPI-4.1's status calls */
    const char *pc = getenv("MPI4_PART_CASE"), *only = getenv("MPI4_ONLY");
#if NM_BUILD_HAVE_MPI41
    if (only && !strcmp(only, "status41")) {
        t_get_status41(c, dev);
        goto done;
    }
#endif
    t_partitioned(c, dev, host, pc ? atoi(pc) % 6 : 3);
    if (only && !strcmp(only, "part")) goto done;
    const unsigned long long staged0 = route_calls("Isendrecv", NCCLMPI_ROUTE_STAGED);
    t_isendrecv(c, dev, host);
    if (route_calls("Isendrecv", NCCLMPI_ROUTE_STAGED) == staged0) FAIL("no MPI_Isendrecv on device buffers was staged");
    t_neighbor_persistent(ring, dev);
    {  /* a blocking device collective first: the communicator's NCCL side where there is one */
        int *a = (int *)(uintptr_t)b[3];
        for (int i = 0; i < K; i++) a[i] = rank + i;
        MPI_Allreduce(MPI_IN_PLACE, a, K, MPI_INT, MPI_SUM, c);
        t_persistent(c, dev[2], a);
    }
    t_host_persistent(c);
#if NM_BUILD_HAVE_MPI41
    t_get_status41(c, dev);
#endif
#if NM_BUILD_HAVE_MPI_LARGE
    if (size <= 64) t_large(c, dev);
#endif
done:;
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? "mpi4_device_prog: %d failure(s)\n" : "mpi4_device_prog: ok\n", total);
    MPI_Comm_free(&ring);
    MPI_Comm_free(&c);
    MPI_Finalize();
    return total ? 1 : 0;
}
