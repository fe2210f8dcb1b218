/* intercomm_prog: collectives on intercommunicators with device buffers of the stand-in CUDA driver
 * (test/unit/fake_cuda.c; its device memory is host memory), run by test/unit/intercomm.sh. On an
 * intercommunicator the buffers follow other rules than on an intracommunicator: a receive buffer
 * holds the *remote* group's blocks, a rooted call names MPI_ROOT at the root and MPI_PROC_NULL at
 * the root's group-mates (whose buffers are not significant), and the result of a reduction is the
 * remote group's. Every call is compared byte for byte with the real MPI's own call (PMPI_) on
 * host copies of the same inputs into the same poisoned buffers, the bytes after the significant
 * ones included (a staged copy sized for the local group would differ there, or overrun).
 * Groups: A = the world ranks below split (INTERCOMM_SPLIT, default 1), B = the others, so that
 * the two groups differ in size; also the two halves of an MPI_Comm_split by parity, and the
 * intracommunicator MPI_Intercomm_merge makes, used once more with device buffers. Open MPI 4.1's
 * MPI_Reduce_scatter(_block) on intercommunicators fails its own calls (MPI_ERR_TRUNCATE on host
 * buffers) and is left out.
 * Then the same three calls over 16 MiB (above two staged chunks of NCCLMPI_STAGE_CHUNK, where the
 * staged route would pipeline on an intracommunicator): MPI_Allreduce, MPI_Reduce whose MPI_ROOT
 * passes NULL as its send buffer (legal: it sends nothing) and MPI_Bcast, checked whole. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { N = 5, CAP = 4 * N * 8 + 64, NBUF = 2 };

enum { BIGN = (16 << 20) / 4 + 4096 }; /* ints: just over 16 MiB */

static int wrank, wsize, failures;
static CUdeviceptr bigbuf[2];
static int lrank, rsize, root_group; /* root_group: this rank's group holds the root */
static MPI_Comm ic;
static CUdeviceptr dbuf[NBUF];

/* f(real, s, r): the call on ic, through the real MPI (real) or ncclmpi */
typedef int (*call_fn)(int real, int *s, int *r);

static int root_arg(void) { return root_group ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0; }

/* f on n ints of device buffers (bufs) and of host copies, compared; the values repeat every
 * 100000 elements (i % 100000: small enough for sums of any group) */
static void check_in(const char *what, call_fn f, size_t n, const CUdeviceptr *bufs)
{
    int *hs = malloc(n * sizeof(int)), *hr = malloc(n * sizeof(int));
    int *ds = (int *)(uintptr_t)bufs[0], *dr = (int *)(uintptr_t)bufs[1];
    for (size_t i = 0; i < n; i++) {
        const int k = (int)(i % 100000);
        hs[i] = ds[i] = 1000 * wrank + 3 * k + 1, hr[i] = dr[i] = -7 - k;
    }
    const int want = f(1, hs, hr), got = f(0, ds, dr);
    size_t i = 0;
    while (i < n && hr[i] == dr[i] && hs[i] == ds[i]) i++;
    if (want != got || i < n) {
        printf("intercomm_prog: [world rank %d] FAIL %s: rc %d (real MPI %d), first differing element %zu: %d (real MPI %d)\n",
               wrank, what, got, want, i, i < n ? dr[i] : 0, i < n ? hr[i] : 0);
        failures++;
    }
    free(hs);
    free(hr);
}
static void check(const char *what, call_fn f) { check_in(what, f, CAP, dbuf); }

static int wait_if(int rc, MPI_Request *q) { return rc != MPI_SUCCESS ? rc : PMPI_Wait(q, MPI_STATUS_IGNORE); }
static int wait_nm(int rc, MPI_Request *q) { return rc != MPI_SUCCESS ? rc : MPI_Wait(q, MPI_STATUS_IGNORE); }
#define CALL(real, fn, ...) ((real) ? P##fn(__VA_ARGS__) : fn(__VA_ARGS__))
#define ICALL(real, fn, ...)                                                            \
    do {                                                                                \
        MPI_Request q_;                                                                 \
        return (real) ? wait_if(P##fn(__VA_ARGS__, &q_), &q_) : wait_nm(fn(__VA_ARGS__, &q_), &q_); \
    } while (0)

static int c_allreduce(int real, int *s, int *r) { return CALL(real, MPI_Allreduce, s, r, N, MPI_INT, MPI_SUM, ic); }
static int c_allgather(int real, int *s, int *r) { return CALL(real, MPI_Allgather, s, N, MPI_INT, r, N, MPI_INT, ic); }
static int c_allgatherv(int real, int *s, int *r)
{
    int c[16], d[16];
    for (int i = 0; i < rsize; i++) c[i] = N - i % N, d[i] = 2 * N * i + 1;
    return CALL(real, MPI_Allgatherv, s, N - lrank % N, MPI_INT, r, c, d, MPI_INT, ic);
}
static int c_alltoall(int real, int *s, int *r) { return CALL(real, MPI_Alltoall, s, N, MPI_INT, r, N, MPI_INT, ic); }
static int c_alltoallv(int real, int *s, int *r)
{
    int sc[16], sd[16], rc[16], rd[16];
    for (int i = 0; i < rsize; i++) sc[i] = 1 + (lrank + i) % N, sd[i] = 2 * N * i, rc[i] = 1 + (i + lrank) % N, rd[i] = 2 * N * i + 2;
    return CALL(real, MPI_Alltoallv, s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, ic);
}
static int c_bcast(int real, int *s, int *r)
{
    (void)r;
    return CALL(real, MPI_Bcast, s, N, MPI_INT, root_arg(), ic);
}
static int c_gather(int real, int *s, int *r) { return CALL(real, MPI_Gather, s, N, MPI_INT, r, N, MPI_INT, root_arg(), ic); }
static int c_gatherv(int real, int *s, int *r)
{
    int c[16], d[16];
    for (int i = 0; i < rsize; i++) c[i] = 1 + i % N, d[i] = 2 * N * i + 3;
    return CALL(real, MPI_Gatherv, s, 1 + lrank % N, MPI_INT, r, c, d, MPI_INT, root_arg(), ic);
}
static int c_scatter(int real, int *s, int *r) { return CALL(real, MPI_Scatter, s, N, MPI_INT, r, N, MPI_INT, root_arg(), ic); }
static int c_scatterv(int real, int *s, int *r)
{
    int c[16], d[16];
    for (int i = 0; i < rsize; i++) c[i] = 1 + i % N, d[i] = 2 * N * i + 1;
    return CALL(real, MPI_Scatterv, s, c, d, MPI_INT, r, 1 + lrank % N, MPI_INT, root_arg(), ic);
}
static int c_reduce(int real, int *s, int *r) { return CALL(real, MPI_Reduce, s, r, N, MPI_INT, MPI_SUM, root_arg(), ic); }
static int c_iallreduce(int real, int *s, int *r) { ICALL(real, MPI_Iallreduce, s, r, N, MPI_INT, MPI_MAX, ic); }
static int c_iallgather(int real, int *s, int *r) { ICALL(real, MPI_Iallgather, s, N, MPI_INT, r, N, MPI_INT, ic); }
static int c_ialltoall(int real, int *s, int *r) { ICALL(real, MPI_Ialltoall, s, N, MPI_INT, r, N, MPI_INT, ic); }
static int c_ibcast(int real, int *s, int *r)
{
    (void)r;
    ICALL(real, MPI_Ibcast, s, N, MPI_INT, root_arg(), ic);
}
static int c_igather(int real, int *s, int *r) { ICALL(real, MPI_Igather, s, N, MPI_INT, r, N, MPI_INT, root_arg(), ic); }
static int c_ireduce(int real, int *s, int *r) { ICALL(real, MPI_Ireduce, s, r, N, MPI_INT, MPI_SUM, root_arg(), ic); }

/* the large calls: whole buffers compared; Reduce's MPI_ROOT passes NULL as its send buffer */
static int b_allreduce(int real, int *s, int *r) { return CALL(real, MPI_Allreduce, s, r, BIGN, MPI_INT, MPI_SUM, ic); }
static int b_reduce(int real, int *s, int *r)
{
    const int root = root_arg();
    return CALL(real, MPI_Reduce, root == MPI_ROOT ? NULL : s, r, BIGN, MPI_INT, MPI_SUM, root, ic);
}
static int b_bcast(int real, int *s, int *r)
{
    (void)r;
    return CALL(real, MPI_Bcast, s, BIGN, MPI_INT, root_arg(), ic);
}

static void check_big(const char *what, call_fn f) { check_in(what, f, BIGN + 64, bigbuf); }

static const struct {
    const char *name;
    call_fn f;
} big_calls[] = {{"MPI_Allreduce of 16 MiB", b_allreduce}, {"MPI_Reduce of 16 MiB, NULL sendbuf at MPI_ROOT", b_reduce},
                 {"MPI_Bcast of 16 MiB", b_bcast}};

static const struct {
    const char *name;
    call_fn f;
} calls[] = {
    {"MPI_Allreduce", c_allreduce}, {"MPI_Allgather", c_allgather}, {"MPI_Allgatherv", c_allgatherv},
    {"MPI_Alltoall", c_alltoall},   {"MPI_Alltoallv", c_alltoallv}, {"MPI_Bcast", c_bcast},
    {"MPI_Gather", c_gather},       {"MPI_Gatherv", c_gatherv},     {"MPI_Scatter", c_scatter},
    {"MPI_Scatterv", c_scatterv},   {"MPI_Reduce", c_reduce},       {"MPI_Iallreduce", c_iallreduce},
    {"MPI_Iallgather", c_iallgather}, {"MPI_Ialltoall", c_ialltoall}, {"MPI_Ibcast", c_ibcast},
    {"MPI_Igather", c_igather},     {"MPI_Ireduce", c_ireduce},
};

/* every call on the intercommunicator between the world ranks of color 0 and of color 1 (other:
 * the lowest world rank of the other group), first with the root in the group of color 0, then in
 * the other */
static void run(int color, int other, const char *groups)
{
    MPI_Comm local;
    MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, other, 17, &ic);
    MPI_Comm_rank(ic, &lrank);
    MPI_Comm_remote_size(ic, &rsize);
    for (int side = 0; side < 2; side++) {
        root_group = color == side;
        for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]); k++) {
            char what[128];
            snprintf(what, sizeof(what), "%s, %s, root in group %d", calls[k].name, groups, side);
            check(what, calls[k].f);
        }
        for (size_t k = 0; k < sizeof(big_calls) / sizeof(big_calls[0]); k++) {
            char what[160];
            snprintf(what, sizeof(what), "%s, %s, root in group %d", big_calls[k].name, groups, side);
            check_big(what, big_calls[k].f);
        }
    }
    /* the merged intracommunicator, device buffers once more */
    MPI_Comm merged;
    MPI_Intercomm_merge(ic, color, &merged);
    MPI_Comm saved = ic;
    ic = merged;
    MPI_Comm_size(merged, &rsize);
    MPI_Comm_rank(merged, &lrank);
    root_group = 0;
    check("MPI_Allreduce on the merged communicator", c_allreduce);
    check("MPI_Allgather on the merged communicator", c_allgather);
    check("MPI_Alltoallv on the merged communicator", c_alltoallv);
    ic = saved;
    MPI_Comm_free(&merged);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (!stand_in_driver("intercomm_prog", NBUF, CAP * sizeof(int), dbuf) ||
        !stand_in_driver("intercomm_prog", 2, (BIGN + 64) * sizeof(int), bigbuf))
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (wsize < 2) {
        if (wrank == 0) printf("intercomm_prog: ok (needs 2 ranks: nothing run)\n");
        MPI_Finalize();
        return 0;
    }
    const char *e = getenv("INTERCOMM_SPLIT");
    const int split = e ? atoi(e) : 1;
    char groups[64];
    snprintf(groups, sizeof(groups), "world ranks below %d and the others", split);
    run(wrank < split ? 0 : 1, wrank < split ? split : 0, groups);
    run(wrank % 2, wrank % 2 ? 0 : 1, "even and odd world ranks");
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0) printf("intercomm_prog: %s (%d ranks, %d failures)\n", all ? "FAIL" : "ok", wsize, all);
    MPI_Finalize();
    return all != 0;
}
