/* self_copy_prog: blocking device MPI_Sendrecv from each rank to itself on the stand-in CUDA driver
 * (test/unit/fake_cuda.c; its device memory is host memory, so the program fills and checks it
 * directly), run by test/unit/self_copy.sh at 1-3 ranks, envelopes on and off. Where the receive
 * can take nothing but the call's own send (route.h, nm_p2p_self_copy), the call is one device
 * copy: the stand-in counts one cuMemcpyAsync (fake_cuda_async_copies; two or more on any other
 * path). Where an earlier message is pending for the receive (an MPI_Isend to itself, one a probe
 * took out of matching; a wildcard tag), the receive takes that one first, and the call's send
 * goes to a receive posted before the call. Also: a longer receive buffer (the status counts the message; the rest
 * untouched), an empty message, a host send buffer, any source (a copy at one rank only), and a
 * receive buffer too short (MPI_ERR_TRUNCATE, as the real MPI says it); MPI_Sendrecv_replace to
 * itself (no copy: the buffer keeps what it sends), alone and with a message pending, and around
 * the ring (an MPI_Isend's envelope from another rank, decoded into the buffer). Once a send to
 * itself went to the real MPI on a communicator, every call to itself there takes the real MPI's
 * way (a message may be pending as far as ncclmpi knows: route.h), and a new one copies. With
 * SELF_COPY_THREADS the
 * program runs at MPI_THREAD_MULTIPLE, where no call is a copy (another thread may send to the
 * rank meanwhile) and every result must be the same. Buffers poisoned, every value checked. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { N = 4096, EXTRA = 100, NBUF = 5 };  /* floats: 16 KiB messages (envelopes where they are on) */

static int rank, size, failures, threads;
static unsigned long *copies;  /* the stand-in's count of cuMemcpyAsync */

#define CHECK(c, ...)                                                         \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "self_copy_prog: [rank %d] FAIL ", rank);        \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* SELF_COPY_TRACE: say each step on stderr (where a run waits) */
static void step(const char *name)
{
    if (getenv("SELF_COPY_TRACE")) fprintf(stderr, "self_copy_prog: [rank %d] step %s\n", rank, name);
}
static float val(int seed, int i) { return (float)(seed * 100003 + rank * 1009 + i); }
static void fill(float *p, int n, int seed)
{
    for (int i = 0; i < n; i++) p[i] = val(seed, i);
}
static void poison(float *p, int n)
{
    for (int i = 0; i < n; i++) p[i] = -7.0f;
}
static int same(const float *p, int n, int seed)
{
    for (int i = 0; i < n; i++)
        if (p[i] != val(seed, i)) return 0;
    return 1;
}
static int poisoned(const float *p, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i] != -7.0f) return 0;
    return 1;
}
static void status_is(const MPI_Status *st, int tag, int count, const char *what)
{
    int n = -1;
    MPI_Get_count(st, MPI_FLOAT, &n);
    CHECK(st->MPI_SOURCE == rank && st->MPI_TAG == tag && n == count, "%s: status source %d tag %d count %d, want %d %d %d",
          what, st->MPI_SOURCE, st->MPI_TAG, n, rank, tag, count);
}
/* the copies one call made: `want` where it is the self path (1 for a copy, 0 for
 * MPI_Sendrecv_replace; a different count at MPI_THREAD_MULTIPLE, where no call takes it) */
static void copied(unsigned long before, unsigned long want, const char *what)
{
    if (!copies) return;
    const unsigned long n = *copies - before;
    if (threads) CHECK(n != want, "%s: %lu copies at MPI_THREAD_MULTIPLE, where no call is the self path", what, n);
    else CHECK(n == want, "%s: %lu device copies, want %lu", what, n, want);
}
static void copied_once(unsigned long before, const char *what) { copied(before, 1, what); }
/* a call that must take the real MPI's way (not `self`: its self path's count of copies) */
static void real_way(unsigned long before, unsigned long self, const char *what)
{
    if (copies) CHECK(*copies - before != self, "%s: the self path's %lu copies, where a message may be pending", what, self);
}

/* An earlier message (tag `early`, from buffer a, seed) is pending when the rank calls
 * MPI_Sendrecv to itself (send tag `late` from s, receive tag rtag into r): the receive takes the
 * earlier one; the call's send goes to the receive posted before it (into a2). probe: a probe
 * finds the earlier message first (where it is an envelope, it leaves the real MPI's matching). */
static void pending(const char *name, const char *what, int early, int late, int rtag, int probe, int seed, float *s,
                    float *r, float *a, float *a2, MPI_Comm c)
{
    MPI_Request rr, rq;
    MPI_Status st;
    step(name);
    fill(a, N, seed);
    fill(s, N, seed + 1);
    poison(r, N);
    poison(a2, N);
    MPI_Irecv(a2, N, MPI_FLOAT, rank, late, c, &rr);
    MPI_Isend(a, N, MPI_FLOAT, rank, early, c, &rq);
    if (probe) MPI_Probe(rank, early, c, &st);
    MPI_Sendrecv(s, N, MPI_FLOAT, rank, late, r, N, MPI_FLOAT, rank, rtag, c, &st);
    CHECK(same(r, N, seed), "%s: the receive did not take the earlier message", what);
    status_is(&st, early, N, what);
    MPI_Wait(&rr, MPI_STATUS_IGNORE);
    CHECK(same(a2, N, seed + 1), "%s: the call's send did not reach the receive posted for it", what);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv)
{
    threads = stand_in_mpi_init(&argc, &argv, "SELF_COPY_THREADS", &rank, &size) > 1;
    CUdeviceptr b[NBUF];
    void *drv = stand_in_driver("self_copy_prog", NBUF, (N + EXTRA) * sizeof(float), b);
    if (!drv) MPI_Abort(MPI_COMM_WORLD, 1);
    copies = (unsigned long *)dlsym(drv, "fake_cuda_async_copies");
    CHECK(copies != NULL, "the stand-in driver counts no copies");
    float *s = (float *)b[0], *r = (float *)b[1], *a = (float *)b[2], *a2 = (float *)b[3], *z = (float *)b[4];
    float *h = malloc(N * sizeof(float));
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Status st;
    MPI_Request rq;
    unsigned long c0;

    /* 1: the copy, into a longer buffer: the message's count, the rest untouched */
    for (int round = 0; round < 3; round++) {
        fill(s, N, 1 + round);
        poison(r, N + EXTRA);
        c0 = copies ? *copies : 0;
        int rc = MPI_Sendrecv(s, N, MPI_FLOAT, rank, 3, r, N + EXTRA, MPI_FLOAT, rank, 3, c, &st);
        CHECK(rc == MPI_SUCCESS, "plain: rc %d", rc);
        copied_once(c0, "plain");
        CHECK(same(r, N, 1 + round) && poisoned(r + N, EXTRA), "plain round %d: wrong data", round);
        status_is(&st, 3, N, "plain");
    }
    step("2");
    /* 2: any tag; any source (a copy at one rank: no other rank can send) */
    fill(s, N, 4);
    poison(r, N);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv(s, N, MPI_FLOAT, rank, 4, r, N, MPI_FLOAT, rank, MPI_ANY_TAG, c, &st);
    copied_once(c0, "any tag");
    CHECK(same(r, N, 4), "any tag: wrong data");
    status_is(&st, 4, N, "any tag");
    fill(s, N, 5);
    poison(r, N);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv(s, N, MPI_FLOAT, rank, 5, r, N, MPI_FLOAT, MPI_ANY_SOURCE, 5, c, &st);
    if (size == 1) copied_once(c0, "any source, one rank");
    CHECK(same(r, N, 5), "any source: wrong data");
    status_is(&st, 5, N, "any source");
    /* 3-5: an earlier message to itself is the receive's. (The call's own send then goes to a
     * receive posted before the call: a send that waited for a receive posted after it would wait
     * for ever under any MPI, which may hold a standard send until it is matched.) */
    pending("3", "pending, any tag", 8, 9, MPI_ANY_TAG, 0, 6, s, r, a, a2, c);
    pending("4", "pending", 10, 11, 10, 0, 8, s, r, a, a2, c);
    pending("5", "probed", 12, 13, MPI_ANY_TAG, 1, 10, s, r, a, a2, c);
    step("6");
    /* 6: a host send buffer into device memory */
    for (int i = 0; i < N; i++) h[i] = val(12, i);
    poison(r, N);
    MPI_Sendrecv(h, N, MPI_FLOAT, rank, 13, r, N, MPI_FLOAT, rank, 13, c, &st);
    CHECK(same(r, N, 12), "host send: wrong data");
    status_is(&st, 13, N, "host send");
    step("7");
    /* 7: an empty message */
    poison(z, N);
    MPI_Sendrecv(s, 0, MPI_FLOAT, rank, 14, z, N, MPI_FLOAT, rank, 14, c, &st);
    CHECK(poisoned(z, N), "empty: the receive buffer changed");
    status_is(&st, 14, 0, "empty");
    step("8");
    /* 8: a receive buffer too short: the real MPI's class */
    fill(s, N, 13);
    int rc = MPI_Sendrecv(s, N, MPI_FLOAT, rank, 15, r, N / 2, MPI_FLOAT, rank, 15, c, &st), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "truncated: class %d, want MPI_ERR_TRUNCATE", cls);
    step("9");
    /* 9: sends to itself went to the real MPI on c (3-5): a message to itself may be pending there
     * as far as ncclmpi knows, so its calls to itself take the real MPI's order from then on, the
     * replace too (route.h, self_sent); a communicator that carried none still copies */
    fill(s, N, 14);
    poison(r, N);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv(s, N, MPI_FLOAT, rank, 3, r, N, MPI_FLOAT, rank, 3, c, &st);
    real_way(c0, 1, "plain after sends to itself");
    CHECK(same(r, N, 14), "plain after sends to itself: wrong data");
    status_is(&st, 3, N, "plain after sends to itself");
    fill(s, N, 15);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv_replace(s, N, MPI_FLOAT, rank, 16, rank, 16, c, &st);
    real_way(c0, 0, "replace after sends to itself");
    CHECK(same(s, N, 15), "replace after sends to itself: the buffer changed");
    MPI_Comm c2;
    MPI_Comm_dup(MPI_COMM_WORLD, &c2);
    fill(s, N, 14);
    poison(r, N);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv(s, N, MPI_FLOAT, rank, 3, r, N, MPI_FLOAT, rank, 3, c2, &st);
    copied_once(c0, "plain on a new communicator");
    CHECK(same(r, N, 14), "plain on a new communicator: wrong data");
    step("10");
    /* 10: MPI_Sendrecv_replace to itself: its buffer holds what it receives, no copy; with an
     * earlier message pending (any tag), the buffer takes that one and its send goes to the
     * receive posted for it */
    fill(s, N, 15);
    c0 = copies ? *copies : 0;
    MPI_Sendrecv_replace(s, N, MPI_FLOAT, rank, 16, rank, 16, c2, &st);
    copied(c0, 0, "replace");
    CHECK(same(s, N, 15), "replace: the buffer changed");
    status_is(&st, 16, N, "replace");
    fill(s, N, 16);
    fill(a, N, 17);
    poison(a2, N);
    MPI_Request rr2[2];
    MPI_Irecv(a2, N, MPI_FLOAT, rank, 18, c, &rr2[0]);
    MPI_Isend(a, N, MPI_FLOAT, rank, 17, c, &rr2[1]);
    MPI_Sendrecv_replace(s, N, MPI_FLOAT, rank, 18, rank, MPI_ANY_TAG, c, &st);
    CHECK(same(s, N, 17), "replace, pending: the buffer did not take the earlier message");
    status_is(&st, 17, N, "replace, pending");
    MPI_Waitall(2, rr2, MPI_STATUSES_IGNORE);
    CHECK(same(a2, N, 16), "replace, pending: its send did not carry the buffer's old content");
    step("11");
    /* 11: MPI_Sendrecv_replace receiving around the ring what an MPI_Isend sent (an envelope where
     * they are on, which the buffer must decode; it did not before 2026-12-07) */
    if (size > 1) {
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        fill(a, N, 18);
        poison(s, N);
        MPI_Isend(a, N, MPI_FLOAT, next, 19, c, &rq);
        MPI_Sendrecv_replace(s, N, MPI_FLOAT, MPI_PROC_NULL, 0, prev, 19, c, &st);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += s[i] != (float)(18 * 100003 + prev * 1009 + i);
        CHECK(!bad, "replace around the ring: %d wrong values", bad);
        int n = -1;
        MPI_Get_count(&st, MPI_FLOAT, &n);
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 19 && n == N, "replace around the ring: status %d %d %d",
              st.MPI_SOURCE, st.MPI_TAG, n);
    }
    step("12");
    /* 12: a Sendrecv whose empty send goes to itself and whose receive comes from another rank
     * (one buffer: not the self path) leaves its zero-byte message pending; a later Sendrecv to
     * itself receiving any tag must take that one (count 0), its own send going to the receive
     * posted for it */
    if (size > 1) {
        MPI_Comm c3;
        MPI_Comm_dup(MPI_COMM_WORLD, &c3);
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        fill(a, N, 20);
        poison(r, N);
        MPI_Isend(a, N, MPI_FLOAT, next, 41, c3, &rq);
        MPI_Sendrecv(s, 0, MPI_FLOAT, rank, 40, r, N, MPI_FLOAT, prev, 41, c3, &st);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        fill(s, N, 21);
        poison(r, N);
        poison(a2, N);
        MPI_Request rr;
        MPI_Irecv(a2, N, MPI_FLOAT, rank, 42, c3, &rr);
        MPI_Sendrecv(s, N, MPI_FLOAT, rank, 42, r, N, MPI_FLOAT, rank, MPI_ANY_TAG, c3, &st);
        status_is(&st, 40, 0, "after an empty send to itself");
        CHECK(poisoned(r, N), "after an empty send to itself: the receive took the call's own message");
        MPI_Wait(&rr, MPI_STATUS_IGNORE);
        CHECK(same(a2, N, 21), "after an empty send to itself: the call's send did not reach the receive posted for it");
        MPI_Comm_free(&c3);
    }
    int flag = 1;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "a message is left over");
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c2, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "a message is left over (the new communicator)");
    MPI_Comm_free(&c2);
    MPI_Comm_free(&c);
    free(h);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("self_copy_prog: %s (%d ranks%s)\n", all ? "FAILED" : "ok", size, threads ? ", MPI_THREAD_MULTIPLE" : "");
    MPI_Finalize();
    return all != 0;
}
