/* Completion and request functions on host-buffer requests: MPI_Wait Waitall Waitany Waitsome
 * Test Testall Testany Testsome Request_free Request_get_status Cancel.
 *
 *  - null requests, all-null arrays and zero-length arrays (empty statuses, MPI_UNDEFINED)
 *  - mixed arrays: receives, sends, MPI_REQUEST_NULL, an inactive persistent request and a
 *    nonblocking collective, completed by each of the six array functions
 *  - the Test forms answer false while the message cannot have been sent yet, and leave the
 *    requests alone; Request_get_status on an active request neither completes nor frees it
 *  - Request_free of an active send (the message still arrives) and of a persistent request
 *  - Cancel of an unmatched receive (MPI_Test_cancelled true), of a started persistent
 *    receive, and of a receive that already completed (not cancelled, data received)
 */
#include "common.h"

static int R, P, next, prev;
static const MPI_Comm W = MPI_COMM_WORLD;

static void t_null(void)
{
    MPI_Request n = MPI_REQUEST_NULL, arr[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status st, sts[3];
    int flag = -1, idx = -5, out = -5, ids[3];
    tu_poison_status(&st);
    OK(Wait, &n, &st);
    CHECK_EMPTY_STATUS(st, MPI_ANY_SOURCE);
    tu_poison_status(&st);
    OK(Test, &n, &flag, &st);
    CHECK(flag == 1);
    CHECK_EMPTY_STATUS(st, MPI_ANY_SOURCE);
    for (int i = 0; i < 3; i++) tu_poison_status(&sts[i]);
    OK(Waitall, 3, arr, sts);
    for (int i = 0; i < 3; i++) CHECK_EMPTY_STATUS(sts[i], MPI_ANY_SOURCE);
    tu_poison_status(&st);
    OK(Waitany, 3, arr, &idx, &st);
    CHECK(idx == MPI_UNDEFINED, "Waitany on null requests: index %d", idx);
    CHECK_EMPTY_STATUS(st, MPI_ANY_SOURCE);
    OK(Waitsome, 3, arr, &out, ids, sts);
    CHECK(out == MPI_UNDEFINED, "Waitsome on null requests: outcount %d", out);
    flag = -1;
    OK(Testall, 3, arr, &flag, sts);
    CHECK(flag == 1);
    flag = -1, idx = -5;
    tu_poison_status(&st);
    OK(Testany, 3, arr, &idx, &flag, &st);
    CHECK(flag == 1 && idx == MPI_UNDEFINED, "Testany on null requests: flag %d index %d", flag, idx);
    CHECK_EMPTY_STATUS(st, MPI_ANY_SOURCE);
    out = -5;
    OK(Testsome, 3, arr, &out, ids, sts);
    CHECK(out == MPI_UNDEFINED, "Testsome on null requests: outcount %d", out);
    flag = -1;
    tu_poison_status(&st);
    OK(Request_get_status, MPI_REQUEST_NULL, &flag, &st);
    CHECK(flag == 1);
    CHECK_EMPTY_STATUS(st, MPI_ANY_SOURCE);
    /* zero-length arrays */
    OK(Waitall, 0, NULL, MPI_STATUSES_IGNORE);
    idx = -5;
    OK(Waitany, 0, NULL, &idx, MPI_STATUS_IGNORE);
    CHECK(idx == MPI_UNDEFINED);
    out = -5;
    OK(Waitsome, 0, NULL, &out, NULL, MPI_STATUSES_IGNORE);
    CHECK(out == MPI_UNDEFINED);
    flag = -1;
    OK(Testall, 0, NULL, &flag, MPI_STATUSES_IGNORE);
    CHECK(flag == 1);
    flag = -1, idx = -5;
    OK(Testany, 0, NULL, &idx, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 1 && idx == MPI_UNDEFINED);
    out = -5;
    OK(Testsome, 0, NULL, &out, NULL, MPI_STATUSES_IGNORE);
    CHECK(out == MPI_UNDEFINED);
}

/* The array: what entry i is, and what its status must say. */
enum { NA = 9 };
enum { E_RECV_INT, E_NULL, E_SEND, E_RECV_VEC, E_INACTIVE, E_SEND2, E_IBARRIER, E_NULL2, E_RECV_BIG };
static const char *const HOW[6] = {"Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome"};

static void t_mixed(int how)
{
    const int tag = 2000 + 10 * how, nbig = 50000;
    int *si = (int *)tu_alloc(16 * sizeof(int)), *sv = (int *)tu_alloc(18 * sizeof(int));
    int *sb = (int *)tu_alloc(nbig * sizeof(int)), *inact = (int *)tu_alloc(4 * sizeof(int));
    rimg_t ri = rimg_new(16), rv = rimg_new(3 * 12), rb = rimg_new(nbig);
    mt_place(&M_INT, si, 10, R, how);
    mt_place(&M_INT, ri.img, 10, prev, how);
    mt_place(&M_INT, sv, 18, R, how + 10);
    mt_place(&M_VEC, rv.img, 3, prev, how + 10);
    mt_place(&M_INT, sb, nbig, R, how + 20);
    mt_place(&M_INT, rb.img, nbig, prev, how + 20);

    MPI_Request req[NA];
    for (int i = 0; i < NA; i++) req[i] = MPI_REQUEST_NULL;
    OK(Irecv, ri.buf, 16, MPI_INT, prev, tag, W, &req[E_RECV_INT]);
    OK(Irecv, rv.buf, 3, T_VEC, MPI_ANY_SOURCE, tag + 1, W, &req[E_RECV_VEC]);
    OK(Recv_init, inact, 4, MPI_INT, prev, tag + 9, W, &req[E_INACTIVE]);
    OK(Irecv, rb.buf, nbig, MPI_INT, prev, MPI_ANY_TAG, W, &req[E_RECV_BIG]);
    OK(Isend, sv, 18, MPI_INT, next, tag + 1, W, &req[E_SEND2]);
    OK(Ibarrier, W, &req[E_IBARRIER]);
    OK(Isend, si, 10, MPI_INT, next, tag, W, &req[E_SEND]);
    MPI_Request big_send = MPI_REQUEST_NULL;
    OK(Isend, sb, nbig, MPI_INT, next, tag + 2, W, &big_send);
    const MPI_Request inactive = req[E_INACTIVE];

    MPI_Status sts[NA], st;
    for (int i = 0; i < NA; i++) tu_poison_status(&sts[i]);
    int done[NA] = {0}, flag = 0, idx, out, ids[NA], ok = 1;
    switch (how) {
    case 0: ok = OK(Waitall, NA, req, sts); break;
    case 3:
        while (ok && !flag) ok = OK(Testall, NA, req, &flag, sts);
        break;
    case 1:
    case 4:
        for (;;) {
            idx = -5;
            flag = 0;
            tu_poison_status(&st);
            if (how == 1) ok = OK(Waitany, NA, req, &idx, &st), flag = 1;
            else ok = OK(Testany, NA, req, &idx, &flag, &st);
            if (!ok || (flag && idx == MPI_UNDEFINED)) break;
            if (!flag) {
                CHECK(idx == MPI_UNDEFINED, "Testany: index %d without flag", idx);
                continue;
            }
            CHECK(idx >= 0 && idx < NA, "%s index %d", HOW[how], idx);
            if (idx < 0 || idx >= NA) break;
            done[idx]++;
            sts[idx] = st;
        }
        break;
    default:
        for (;;) {
            out = -5;
            MPI_Status tmp[NA];
            if (how == 2) ok = OK(Waitsome, NA, req, &out, ids, tmp);
            else ok = OK(Testsome, NA, req, &out, ids, tmp);
            if (!ok || out == MPI_UNDEFINED) break;
            CHECK(out >= (how == 2 ? 1 : 0) && out <= NA, "%s outcount %d", HOW[how], out);
            for (int j = 0; j < out && j < NA; j++) {
                CHECK(ids[j] >= 0 && ids[j] < NA, "%s index %d", HOW[how], ids[j]);
                if (ids[j] < 0 || ids[j] >= NA) continue;
                done[ids[j]]++;
                sts[ids[j]] = tmp[j];
            }
        }
        break;
    }
    OK(Wait, &big_send, MPI_STATUS_IGNORE);
    for (int i = 0; i < NA; i++) {
        int active = i != E_NULL && i != E_NULL2 && i != E_INACTIVE;
        if (i == E_INACTIVE) CHECK(req[i] == inactive, "%s changed an inactive persistent request", HOW[how]);
        else CHECK(req[i] == MPI_REQUEST_NULL, "%s: request %d not freed", HOW[how], i);
        if (how == 1 || how == 2 || how == 4 || how == 5)
            CHECK(done[i] == active, "%s: request %d reported %d times", HOW[how], i, done[i]);
        else if (!active) /* Waitall/Testall: empty statuses for null and inactive entries */
            CHECK_EMPTY_STATUS(sts[i], MPI_ANY_SOURCE);
    }
    CHECK_STATUS(sts[E_RECV_INT], prev, tag, MPI_INT, 10);
    CHECK_STATUS(sts[E_RECV_VEC], prev, tag + 1, T_VEC, 3);
    CHECK_STATUS(sts[E_RECV_BIG], prev, tag + 2, MPI_INT, nbig);
    CHECK_RIMG(ri, "%s: int receive", HOW[how]);
    CHECK_RIMG(rv, "%s: vector receive", HOW[how]);
    CHECK_RIMG(rb, "%s: large receive", HOW[how]);
    CHECK_POISON(inact, 4 * sizeof(int), "the inactive persistent receive wrote its buffer");
    OK(Request_free, &req[E_INACTIVE]);
    CHECK(req[E_INACTIVE] == MPI_REQUEST_NULL);
    rimg_free(&ri), rimg_free(&rv), rimg_free(&rb);
    tu_free(si), tu_free(sv), tu_free(sb), tu_free(inact);
}

/* Nothing can arrive before the barrier: every Test form answers false and changes nothing;
 * Request_get_status neither completes nor frees. */
static void t_pending(void)
{
    const int tag = 3000;
    rimg_t x = rimg_new(64);
    mt_place(&M_INT, x.img, 64, prev, 7);
    MPI_Request r = MPI_REQUEST_NULL, s = MPI_REQUEST_NULL;
    MPI_Status st, sts[3];
    int flag = -1, idx = -5, out = -5, ids[3];
    OK(Irecv, x.buf, 64, MPI_INT, prev, tag, W, &r);
    const MPI_Request r0 = r;
    OK(Test, &r, &flag, &st);
    CHECK(flag == 0 && r == r0, "Test: flag %d before the message was sent", flag);
    MPI_Request arr[3] = {MPI_REQUEST_NULL, r, MPI_REQUEST_NULL};
    flag = -1;
    OK(Testall, 3, arr, &flag, sts);
    CHECK(flag == 0 && arr[1] == r0 && arr[0] == MPI_REQUEST_NULL, "Testall: flag %d", flag);
    flag = -1;
    OK(Testany, 3, arr, &idx, &flag, &st);
    CHECK(flag == 0 && idx == MPI_UNDEFINED && arr[1] == r0, "Testany: flag %d index %d", flag, idx);
    OK(Testsome, 3, arr, &out, ids, sts);
    CHECK(out == 0 && arr[1] == r0, "Testsome: outcount %d", out);
    flag = -1;
    OK(Request_get_status, r, &flag, &st);
    CHECK(flag == 0, "Request_get_status: flag %d before the message was sent", flag);
    CHECK(tu_is_poison(x.buf, 64 * sizeof(int)), "receive buffer written before the send");

    OK(Barrier, W);
    int *sb = (int *)tu_alloc(64 * sizeof(int));
    mt_place(&M_INT, sb, 64, R, 7);
    OK(Isend, sb, 64, MPI_INT, next, tag, W, &s);
    flag = 0;
    long polls = 0;
    while (!flag) {
        tu_poison_status(&st);
        OK(Request_get_status, r, &flag, &st);
        polls++;
    }
    CHECK(r == r0, "Request_get_status changed the request");
    CHECK_STATUS(st, prev, tag, MPI_INT, 64);
    CHECK_RIMG(x, "receive seen complete by Request_get_status");
    flag = -1;
    OK(Request_get_status, r, &flag, &st); /* still there, still complete */
    CHECK(flag == 1);
    tu_poison_status(&st);
    OK(Wait, &r, &st);
    CHECK(r == MPI_REQUEST_NULL);
    CHECK_STATUS(st, prev, tag, MPI_INT, 64);
    OK(Wait, &s, MPI_STATUS_IGNORE);
    tu_free(sb);
    rimg_free(&x);
}

/* Request_free of an active send: the message is delivered all the same. */
static void t_request_free(void)
{
    const int tag = 3100, n = 40000; /* rendezvous: the free comes before the data moved */
    int *sb = (int *)tu_alloc(n * sizeof(int));
    mt_place(&M_INT, sb, n, R, 8);
    rimg_t x = rimg_new(n);
    mt_place(&M_INT, x.img, n, prev, 8);
    MPI_Request s = MPI_REQUEST_NULL, r = MPI_REQUEST_NULL;
    OK(Irecv, x.buf, n, MPI_INT, prev, tag, W, &r);
    OK(Isend, sb, n, MPI_INT, next, tag, W, &s);
    OK(Request_free, &s);
    CHECK(s == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
    MPI_Status st;
    OK(Wait, &r, &st);
    CHECK_STATUS(st, prev, tag, MPI_INT, n);
    CHECK_RIMG(x, "message of a freed send request");
    OK(Barrier, W); /* the send buffer may be reused once the receiver has it */
    tu_free(sb);
    rimg_free(&x);
}

static void t_cancel(void)
{
    const int never = 31999;
    MPI_Status st;
    int c = -1, flag = 0;
    /* an unmatched receive, completed by Wait */
    int *b = (int *)tu_alloc(8 * sizeof(int));
    MPI_Request r = MPI_REQUEST_NULL;
    OK(Irecv, b, 8, MPI_INT, MPI_ANY_SOURCE, never, W, &r);
    OK(Cancel, &r);
    tu_poison_status(&st);
    OK(Wait, &r, &st);
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 1, "Irecv not cancelled");
    CHECK(r == MPI_REQUEST_NULL);
    CHECK_POISON(b, 8 * sizeof(int), "a cancelled receive wrote its buffer");
    /* completed by Test */
    OK(Irecv, b, 8, MPI_INT, prev, never, W, &r);
    OK(Cancel, &r);
    while (!flag) OK(Test, &r, &flag, &st);
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 1, "Irecv not cancelled (Test)");
    /* a started persistent receive: cancelled, the request stays, inactive */
    OK(Recv_init, b, 8, MPI_INT, prev, never, W, &r);
    OK(Start, &r);
    OK(Cancel, &r);
    OK(Wait, &r, &st);
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 1, "persistent receive not cancelled");
    CHECK(r != MPI_REQUEST_NULL);
    OK(Request_free, &r);
    /* a receive that already completed: Cancel has no effect */
    rimg_t x = rimg_new(8);
    mt_place(&M_INT, x.img, 8, prev, 9);
    int *sb = (int *)tu_alloc(8 * sizeof(int));
    mt_place(&M_INT, sb, 8, R, 9);
    MPI_Request s;
    OK(Irecv, x.buf, 8, MPI_INT, prev, 3200, W, &r);
    OK(Isend, sb, 8, MPI_INT, next, 3200, W, &s);
    flag = 0;
    while (!flag) OK(Request_get_status, r, &flag, &st);
    OK(Cancel, &r);
    tu_poison_status(&st);
    OK(Wait, &r, &st);
    MPI_Test_cancelled(&st, &c);
    CHECK(c == 0, "a completed receive reported cancelled");
    CHECK_STATUS(st, prev, 3200, MPI_INT, 8);
    CHECK_RIMG(x, "receive cancelled after completion");
    OK(Wait, &s, MPI_STATUS_IGNORE);
    CHECK_POISON(b, 8 * sizeof(int), "a cancelled receive wrote its buffer");
    rimg_free(&x);
    tu_free(sb), tu_free(b);
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, &prev);
    tu_types_create();
    t_null();
    for (int how = 0; how < 6; how++) t_mixed(how);
    t_pending();
    t_request_free();
    t_cancel();
    tu_types_free();
    return tu_finalize();
}
