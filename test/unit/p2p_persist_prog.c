/* p2p_persist_prog: persistent point-to-point requests on device buffers of the stand-in CUDA
 * driver (test/unit/fake_cuda.c; its device memory is host memory, so the program fills and checks
 * it directly), run by test/unit/p2p_persist.sh with envelopes off, in the host test mode and in
 * device mode (also with the stand-in's CUDA IPC: payloads pulled from the senders' pools).
 * Each rank sets up, once, persistent sends to its ring neighbours and receives from them: a small
 * message, a large one (an envelope where they are on), a synchronous-mode and a ready-mode send,
 * one in a non-contiguous derived type freed right after the call, one received by a wildcard
 * receive (any source, any tag) on another communicator, and one received into a buffer too small
 * (MPI_ERR_TRUNCATE, every time: only where ncclmpi restarts them, as its statistics show, and
 * between processes: Open MPI 4.1 reports no truncation of its own persistent receives, nor of an
 * eager message a process sends itself; MPICH reports the latter, which is allowed). They are
 * restarted ITERS times with MPI_Startall and MPI_Start,
 * completed by MPI_Waitall with and without statuses, MPI_Testall and MPI_Waitany loops and
 * MPI_Request_get_status; the send buffers are rewritten before each start, the receive buffers
 * poisoned; every byte, count, source, tag and error checked (MPI_ERRORS_RETURN). Then a
 * cancelled receive (its buffer left alone), a receive and a send freed while active (the message
 * arrives), and requests freed while inactive. P2P_PERSIST_THREADS set: MPI_THREAD_MULTIPLE, and two
 * threads restart their own set of requests at once, each on communicators of its own. */
#include <mpi.h>
#include <ncclmpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stand_in.h"

enum { ITERS = 40, SMALL = 17, BIG = 3000, SLOT = 16384, TRUNC = 5 };
enum { M_SMALL, M_BIG, M_SSEND, M_RSEND, M_VEC, M_WILD, M_TRUNC, NM }; /* the messages */
enum { NBUF = 4 * NM + 4 }; /* (the second thread's buffers from 2 * NM + 4) */

static int rank, size, failures;

static int val(int from, int it, int k, int i) { return from * 1000003 + it * 10007 + k * 101 + i + 1; }
static int len_of(int k) { return k == M_BIG ? BIG : SMALL + k; }

#define FAIL(...)                                                                 \
    do {                                                                          \
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                       \
        printf("rank %d: ", rank);                                                \
        printf(__VA_ARGS__);                                                      \
        printf("\n");                                                             \
    } while (0)

/* the device calls ncclmpi ran as MPI_<fn> (its statistics), 0 without them */
static unsigned long long device_calls(const char *fn)
{
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    ncclmpi_stats_t st;
    if (!get || get(fn, &st) != 0) return 0;
    return st.route[NCCLMPI_ROUTE_STAGED] + st.route[NCCLMPI_ROUTE_NCCL];
}

static const char *err_str(int e)
{
    static char m[MPI_MAX_ERROR_STRING];
    int l = 0;
    MPI_Error_string(e, m, &l);
    return m;
}

/* the requests, set up once and restarted ITERS times (thread th's, on its own communicators c and
 * w and buffers: with P2P_PERSIST_THREADS set two threads run this at once) */
static int nm, trunc, may_trunc, restarted, real_keeps_status;
static int dest[NM], src[NM];

static void restarts(int th, MPI_Comm c, MPI_Comm w, int *const *sb, int *const *rb)
{
    (void)th; /* (both threads' messages are alike: a failure names its iteration and message) */
    MPI_Request rq[NM], sq[NM], all[2 * NM];
    for (int k = 0; k < nm; k++) {
        const int n = len_of(k), tag = 50 + k;
        if (k == M_WILD) MPI_Recv_init(rb[k], SLOT, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, w, &rq[k]);
        else MPI_Recv_init(rb[k], k == M_TRUNC ? TRUNC : SLOT, MPI_INT, src[k], tag, c, &rq[k]);
        if (k == M_VEC) { /* every other int of 2n, the type freed at once */
            MPI_Datatype strided;
            MPI_Type_vector(n, 1, 2, MPI_INT, &strided);
            MPI_Type_commit(&strided);
            MPI_Send_init(sb[k], 1, strided, dest[k], tag, c, &sq[k]);
            MPI_Type_free(&strided);
        } else if (k == M_SSEND) {
            MPI_Ssend_init(sb[k], n, MPI_INT, dest[k], tag, c, &sq[k]);
        } else if (k == M_RSEND) {
            MPI_Rsend_init(sb[k], n, MPI_INT, dest[k], tag, c, &sq[k]);
        } else {
            MPI_Send_init(sb[k], n, MPI_INT, dest[k], tag, k == M_WILD ? w : c, &sq[k]);
        }
    }
    for (int it = 0; it < ITERS; it++) {
        for (int k = 0; k < nm; k++) {
            const int n = len_of(k);
            memset(rb[k], 0xa5, SLOT * sizeof(int));
            if (k == M_VEC)
                for (int i = 0; i < n; i++) sb[k][2 * i] = val(rank, it, k, i), sb[k][2 * i + 1] = -1;
            else
                for (int i = 0; i < n; i++) sb[k][i] = val(rank, it, k, i);
        }
        /* receives first (the ready-mode send needs its receive posted: the barrier) */
        if (it % 2) MPI_Startall(nm, rq);
        else
            for (int k = 0; k < nm; k++) MPI_Start(&rq[k]);
        MPI_Barrier(c);
        MPI_Startall(nm, sq);
        for (int k = 0; k < nm; k++) all[k] = rq[k], all[nm + k] = sq[k];
        MPI_Status st[2 * nm];
        int rc = MPI_SUCCESS, form = it % 5;
        for (int k = 0; k < 2 * nm; k++) st[k].MPI_ERROR = -1;
        if (form == 0 || form == 1) {
            rc = MPI_Waitall(2 * nm, all, form == 0 ? st : MPI_STATUSES_IGNORE);
        } else if (form == 2) {
            int flag = 0;
            while (!flag) rc = MPI_Testall(2 * nm, all, &flag, st);
        } else if (form == 3) {
            for (int m = 0; m < 2 * nm; m++) {
                int idx = -1;
                int e = MPI_Waitany(2 * nm, all, &idx, MPI_STATUS_IGNORE);
                if (idx < 0 || idx >= 2 * nm) { FAIL("iteration %d: MPI_Waitany gave index %d", it, idx); break; }
                st[idx].MPI_ERROR = e;
                if (e != MPI_SUCCESS && (idx != M_TRUNC || !may_trunc)) FAIL("iteration %d: MPI_Waitany request %d: %s", it, idx, err_str(e));
            }
        } else { /* MPI_Request_get_status until complete (the data must be there then), then MPI_Wait */
            for (int k = 0; k < 2 * nm; k++) {
                int flag = 0;
                MPI_Status gs;
                while (!flag) MPI_Request_get_status(all[k], &flag, &gs);
                if (k < nm && k != M_TRUNC && k != M_WILD && rb[k][0] != val(src[k], it, k, 0))
                    FAIL("iteration %d: message %d not there when MPI_Request_get_status reported it complete", it, k);
                st[k].MPI_ERROR = MPI_Wait(&all[k], &st[k]);
            }
        }
        /* the truncated receive fails (where restarted), nothing else */
        const int want = trunc ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
        if (form <= 2 && rc != want && (trunc || !restarted))
            FAIL("iteration %d: the completion returned %s, want %s", it, err_str(rc), trunc ? "MPI_ERR_IN_STATUS" : "MPI_SUCCESS");
        if (form == 0 || form == 2)
            for (int k = 0; k < 2 * nm && rc == MPI_ERR_IN_STATUS; k++) {
                int cls = -1;
                MPI_Error_class(st[k].MPI_ERROR, &cls);
                if ((k == M_TRUNC) != (cls == MPI_ERR_TRUNCATE) || (k != M_TRUNC && cls != MPI_SUCCESS))
                    FAIL("iteration %d: request %d's status error %s", it, k, err_str(st[k].MPI_ERROR));
            }
        if (form >= 3 && trunc) {
            int cls = -1;
            MPI_Error_class(st[M_TRUNC].MPI_ERROR, &cls);
            if (cls != MPI_ERR_TRUNCATE) FAIL("iteration %d: the truncated receive's error %s", it, err_str(st[M_TRUNC].MPI_ERROR));
        }
        for (int k = 0; k < nm; k++) {
            if (k == M_TRUNC) continue;
            const int n = len_of(k), from = src[k];
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (rb[k][i] != val(from, it, k, i)) bad = i;
            const unsigned char *after = (const unsigned char *)(rb[k] + n);
            if (bad >= 0 || after[0] != 0xa5)
                FAIL("iteration %d message %d (%d ints from %d): int %d is %d (want %d), the byte after %s", it, k, n, from, bad,
                     bad < 0 ? 0 : rb[k][bad], bad < 0 ? 0 : val(from, it, k, bad), after[0] == 0xa5 ? "kept" : "written");
            /* (after MPI_Request_get_status, a request the real MPI owns gets its status) */
            if (form == 0 || form == 2 || (form == 4 && (restarted || real_keeps_status))) {
                int cnt = -1;
                MPI_Get_count(&st[k], MPI_INT, &cnt);
                if (cnt != n || st[k].MPI_SOURCE != from || st[k].MPI_TAG != 50 + k)
                    FAIL("iteration %d message %d: status count %d source %d tag %d, want %d %d %d", it, k, cnt,
                         st[k].MPI_SOURCE, st[k].MPI_TAG, n, from, 50 + k);
            }
        }
        /* the truncated receive wrote no more than its room */
        const unsigned char *tail = (const unsigned char *)(rb[M_TRUNC] + TRUNC);
        if (restarted && tail[0] != 0xa5) FAIL("iteration %d: the truncated receive wrote past its room", it);
    }
    for (int k = 0; k < nm; k++) {
        MPI_Request_free(&rq[k]);
        MPI_Request_free(&sq[k]);
    }

}

typedef struct {
    int th;
    MPI_Comm c, w;
    int *sb[NM], *rb[NM];
} thread_args_t;

static void *thread_main(void *p)
{
    thread_args_t *a = p;
    restarts(a->th, a->c, a->w, a->sb, a->rb);
    return NULL;
}

/* 1 when the real MPI's MPI_Wait on its own persistent receive that MPI_Request_get_status already
 * found complete gives the message's status (Open MPI), 0 when it gives an empty one (MPICH
 * 5.0.2): the reference for requests ncclmpi hands to the real MPI unchanged (envelopes off).
 * Host memory, the real MPI's calls only. */
static int real_mpi_keeps_status(void)
{
    int x = 7, y = 0, flag = 0, cnt = -1;
    MPI_Request q[2];
    MPI_Status gs, st;
    PMPI_Recv_init(&y, 1, MPI_INT, 0, 48, MPI_COMM_SELF, &q[0]);
    PMPI_Send_init(&x, 1, MPI_INT, 0, 48, MPI_COMM_SELF, &q[1]);
    PMPI_Startall(2, q);
    while (!flag) PMPI_Request_get_status(q[0], &flag, &gs);
    PMPI_Wait(&q[0], &st);
    PMPI_Wait(&q[1], MPI_STATUS_IGNORE);
    PMPI_Get_count(&st, MPI_INT, &cnt);
    PMPI_Request_free(&q[0]);
    PMPI_Request_free(&q[1]);
    return y == 7 && cnt == 1 && st.MPI_SOURCE == 0 && st.MPI_TAG == 48;
}

int main(int argc, char **argv)
{
    const int nthreads = stand_in_mpi_init(&argc, &argv, "P2P_PERSIST_THREADS", &rank, &size);
    CUdeviceptr b[NBUF];
    if (!stand_in_driver("p2p_persist_prog", NBUF, SLOT * sizeof(int), b)) {
        MPI_Finalize();
        return 77;
    }
    MPI_Comm c, w;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_dup(MPI_COMM_WORLD, &w);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN);
    int *sb[NM], *rb[NM];
    for (int k = 0; k < NM; k++) {
        sb[k] = (int *)(uintptr_t)b[k];
        rb[k] = (int *)(uintptr_t)b[NM + k];
    }
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;
    /* message k goes to dest(k) with tag 50 + k, comes from src(k) */
    for (int k = 0; k < NM; k++) {
        dest[k] = k % 2 ? left : right;
        src[k] = k % 2 ? right : left;
    }
    /* whether ncclmpi restarts persistent requests here (a start runs MPI_Irecv): one to itself */
    {
        MPI_Request pq[2];
        MPI_Recv_init(rb[0], 4, MPI_INT, rank, 49, c, &pq[0]);
        MPI_Send_init(sb[0], 4, MPI_INT, rank, 49, c, &pq[1]);
        MPI_Startall(2, pq);
        MPI_Waitall(2, pq, MPI_STATUSES_IGNORE);
        MPI_Request_free(&pq[0]);
        MPI_Request_free(&pq[1]);
    }
    restarted = device_calls("Irecv") > 0;
    nm = restarted ? NM : M_TRUNC; /* (the truncated receive: only where ncclmpi restarts) */
    trunc = restarted && size > 1; /* (and where the real MPI reports it: see above) */
    real_keeps_status = real_mpi_keeps_status();
    may_trunc = restarted;         /* (at one rank MPICH reports it, as MPI says: allowed, not required) */
    thread_args_t ta[2];
    for (int th = 0; th < nthreads; th++) {
        ta[th].th = th;
        if (th == 0) ta[th].c = c, ta[th].w = w;
        else {
            MPI_Comm_dup(MPI_COMM_WORLD, &ta[th].c);
            MPI_Comm_dup(MPI_COMM_WORLD, &ta[th].w);
            MPI_Comm_set_errhandler(ta[th].c, MPI_ERRORS_RETURN);
            MPI_Comm_set_errhandler(ta[th].w, MPI_ERRORS_RETURN);
        }
        for (int k = 0; k < NM; k++) {
            ta[th].sb[k] = th ? (int *)(uintptr_t)b[2 * NM + 4 + k] : sb[k];
            ta[th].rb[k] = th ? (int *)(uintptr_t)b[3 * NM + 4 + k] : rb[k];
        }
    }
    stand_in_threads(thread_main, ta, sizeof(ta[0]), nthreads);
    if (nthreads > 1) {
        MPI_Comm_free(&ta[1].c);
        MPI_Comm_free(&ta[1].w);
    }

    /* a receive nobody sends to, started and cancelled: cancelled, its buffer untouched */
    int *cb = (int *)(uintptr_t)b[2 * NM];
    memset(cb, 0xa5, 64);
    MPI_Request cq;
    MPI_Recv_init(cb, 16, MPI_INT, left, 99, c, &cq);
    for (int rep = 0; rep < 3; rep++) {
        MPI_Start(&cq);
        MPI_Cancel(&cq);
        MPI_Status cs;
        MPI_Wait(&cq, &cs);
        int cancelled = 0;
        MPI_Test_cancelled(&cs, &cancelled);
        if (!cancelled || ((unsigned char *)cb)[0] != 0xa5) FAIL("cancel %d: cancelled %d, buffer %s", rep, cancelled,
                                                               ((unsigned char *)cb)[0] == 0xa5 ? "kept" : "written");
    }
    MPI_Request_free(&cq);

    /* a receive and a send freed while active: the message still arrives (at a later call) */
    int *fr = (int *)(uintptr_t)b[2 * NM + 1], *fs = (int *)(uintptr_t)b[2 * NM + 2];
    for (int i = 0; i < BIG; i++) fr[i] = -7, fs[i] = val(rank, 0, 98, i);
    MPI_Request frq, fsq;
    MPI_Recv_init(fr, BIG, MPI_INT, left, 98, c, &frq);
    MPI_Send_init(fs, BIG, MPI_INT, right, 98, c, &fsq);
    MPI_Start(&frq);
    MPI_Start(&fsq);
    MPI_Request_free(&frq);
    MPI_Request_free(&fsq);
    int got = 0;
    const double t0 = MPI_Wtime();
    while (!got && MPI_Wtime() - t0 < 10.0) { /* later calls (a test of a request of nothing) */
        MPI_Request dummy;
        int flag;
        MPI_Irecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, c, &dummy);
        MPI_Test(&dummy, &flag, MPI_STATUS_IGNORE);
        got = fr[BIG - 1] == val(left, 0, 98, BIG - 1) && fr[0] == val(left, 0, 98, 0);
    }
    if (!got) FAIL("the receive freed while active never got its message (first int %d, last %d)", fr[0], fr[BIG - 1]);
    MPI_Barrier(MPI_COMM_WORLD); /* (the freed send's buffer stays until every receive has it) */

    MPI_Comm_free(&w);
    MPI_Comm_free(&c);
    int sum = 0;
    MPI_Allreduce(&failures, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("p2p_persist_prog: %s (%d ranks, %s, %d failures)\n", sum ? "FAIL" : "ok", size,
               restarted ? "restarted nonblocking calls" : "the real MPI's persistent requests", sum);
    MPI_Finalize();
    return sum ? 1 : 0;
}
