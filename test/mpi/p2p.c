/* Point-to-point on host buffers: MPI_Send Ssend Bsend Rsend Isend Issend Ibsend Irsend Recv
 * Irecv Sendrecv Sendrecv_replace Probe Iprobe Mprobe Improbe Mrecv Imrecv Send_init Recv_init
 * Start Startall.
 *
 * Messages go around the ring (to rank+1, from rank-1; with one process, to itself), so every
 * part runs at any size. Receives are posted before blocking sends where the standard needs it
 * (synchronous and ready modes, a process talking to itself). Every receive checks the data
 * image of its buffer (vector gaps and bytes behind the buffer must stay poisoned) and its
 * status: MPI_SOURCE, MPI_TAG, MPI_Get_count.
 */
#include "common.h"

static int R, P, next, prev;
static const MPI_Comm W = MPI_COMM_WORLD;

/* A message: sent as (st, sc), received into (rt, rc) where rc may be more than arrives. */
typedef struct {
    const mtype_t *st;
    int sc;
    const mtype_t *rt;
    int rc;     /* posted receive count */
    int rgot;   /* elements of rt that arrive */
} msg_t;
#define NMSG 9
static msg_t MSGS[NMSG];
static void msgs_init(void)
{
    int k = 0;
    MSGS[k++] = (msg_t){&M_INT, 1, &M_INT, 1, 1};
    MSGS[k++] = (msg_t){&M_INT, 0, &M_INT, 4, 0};
    MSGS[k++] = (msg_t){&M_INT, 1000, &M_INT, 1200, 1000};
    MSGS[k++] = (msg_t){&M_INT, 100000, &M_INT, 100000, 100000}; /* rendezvous protocol */
    MSGS[k++] = (msg_t){&M_DBL, 17, &M_DBL, 20, 17};
    MSGS[k++] = (msg_t){&M_CT3, 5, &M_INT, 40, 15};
    MSGS[k++] = (msg_t){&M_VEC, 3, &M_INT, 18, 18};
    MSGS[k++] = (msg_t){&M_INT, 18, &M_VEC, 4, 3};
    MSGS[k++] = (msg_t){&M_VEC, 2, &M_CT3, 4, 4};
}
static const char *mname(const msg_t *m, char *b, size_t n)
{
    snprintf(b, n, "%d %s -> %d %s", m->sc, m->st->name, m->rc, m->rt->name);
    return b;
}

/* the send buffer of message salt from rank src */
static int *make_send(const msg_t *m, int src, int salt)
{
    int *s = (int *)tu_alloc(mt_bytes(m->st, m->sc) + 4);
    mt_place(m->st, s, m->sc, src, salt);
    return s;
}
static rimg_t make_recv(const msg_t *m, int src, int salt)
{
    rimg_t x = rimg_new((long)m->rc * m->rt->ext + 1);
    mt_place(m->rt, x.img, m->rgot, src, salt);
    return x;
}

enum { M_SEND, M_SSEND, M_BSEND, M_RSEND, M_ISEND, M_ISSEND, M_IBSEND, M_IRSEND, NMODES };
static const char *const MODE[NMODES] = {"Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend"};

static int send_mode(int mode, const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Request *req)
{
    switch (mode) {
    case M_SEND: return OK(Send, buf, count, dt, dest, tag, W);
    case M_SSEND: return OK(Ssend, buf, count, dt, dest, tag, W);
    case M_BSEND: return OK(Bsend, buf, count, dt, dest, tag, W);
    case M_RSEND: return OK(Rsend, buf, count, dt, dest, tag, W);
    case M_ISEND: return OK(Isend, buf, count, dt, dest, tag, W, req);
    case M_ISSEND: return OK(Issend, buf, count, dt, dest, tag, W, req);
    case M_IBSEND: return OK(Ibsend, buf, count, dt, dest, tag, W, req);
    default: return OK(Irsend, buf, count, dt, dest, tag, W, req);
    }
}

/* Every send mode x every message shape around the ring. Blocking modes and ready modes
 * receive with a pre-posted MPI_Irecv; the other nonblocking modes with a blocking MPI_Recv.
 * Receives alternate between named and wildcard source/tag. */
static void t_modes(void)
{
    char mn[160];
    for (int mode = 0; mode < NMODES; mode++) {
        for (int k = 0; k < NMSG; k++) {
            const msg_t *m = &MSGS[k];
            int tag = 100 + mode * 16 + k, salt = mode * 10 + k;
            int *s = make_send(m, R, salt);
            rimg_t x = make_recv(m, prev, salt);
            int src = (mode + k) % 3 == 1 ? MPI_ANY_SOURCE : prev, rtag = (mode + k) % 3 == 2 ? MPI_ANY_TAG : tag;
            int nb = mode >= M_ISEND, ready = mode == M_RSEND || mode == M_IRSEND;
            MPI_Request rr = MPI_REQUEST_NULL, sr = MPI_REQUEST_NULL;
            MPI_Status st;
            tu_poison_status(&st);
            if (!nb || ready) {
                OK(Irecv, x.buf, m->rc, m->rt->type, src, rtag, W, &rr);
                if (ready) OK(Barrier, W); /* every receive is posted before any ready send */
                send_mode(mode, s, m->sc, m->st->type, next, tag, &sr);
                OK(Wait, &rr, &st);
                CHECK(rr == MPI_REQUEST_NULL);
                if (nb) OK(Wait, &sr, MPI_STATUS_IGNORE);
            } else {
                send_mode(mode, s, m->sc, m->st->type, next, tag, &sr);
                OK(Recv, x.buf, m->rc, m->rt->type, src, rtag, W, &st);
                OK(Wait, &sr, MPI_STATUS_IGNORE);
            }
            CHECK(sr == MPI_REQUEST_NULL);
            CHECK_RIMG(x, "MPI_%s %s", MODE[mode], mname(m, mn, sizeof(mn)));
            CHECK_STATUS(st, prev, tag, m->rt->type, m->rgot);
            int elems = -1;
            MPI_Get_elements(&st, m->rt->type, &elems);
            CHECK(elems == m->rgot * m->rt->ipe / (m->rt == &M_DBL ? 2 : 1), "MPI_Get_elements %d", elems);
            rimg_free(&x);
            tu_free(s);
        }
    }
}

/* Messages between one pair with one tag arrive in the order sent (MPI-3.1 3.5). */
static void t_order(void)
{
    enum { N = 4, L = 300 };
    int *s = (int *)tu_alloc(N * L * sizeof(int)), *r = (int *)tu_alloc(N * L * sizeof(int));
    int *e = (int *)malloc(N * L * sizeof(int));
    MPI_Request req[N];
    for (int j = 0; j < N; j++) {
        mt_place(&M_INT, s + j * L, L, R, 50 + j);
        mt_place(&M_INT, e + j * L, L, prev, 50 + j);
        OK(Isend, s + j * L, L, MPI_INT, next, 77, W, &req[j]);
    }
    for (int j = 0; j < N; j++) {
        MPI_Status st;
        OK(Recv, r + j * L, L, MPI_INT, prev, 77, W, &st);
        CHECK_STATUS(st, prev, 77, MPI_INT, L);
    }
    CHECK_I(r, e, N * L, "non-overtaking order");
    OK(Waitall, N, req, MPI_STATUSES_IGNORE);
    tu_free(s), tu_free(r), free(e);
}

/* MPI_PROC_NULL: sends succeed at once, receives complete with the empty status of a null
 * process and leave the buffer alone. */
static void t_proc_null(void)
{
    int v[4] = {1, 2, 3, 4}, *r = (int *)tu_alloc(4 * sizeof(int));
    MPI_Status st;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Message msg;
    int flag = -1;
    OK(Send, v, 4, MPI_INT, MPI_PROC_NULL, 1, W);
    OK(Ssend, v, 4, MPI_INT, MPI_PROC_NULL, 1, W);
    OK(Rsend, v, 4, MPI_INT, MPI_PROC_NULL, 1, W);
    OK(Isend, v, 4, MPI_INT, MPI_PROC_NULL, 1, W, &req);
    OK(Wait, &req, &st);
    tu_poison_status(&st);
    OK(Recv, r, 4, MPI_INT, MPI_PROC_NULL, 1, W, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    CHECK_POISON(r, 4 * sizeof(int), "Recv from MPI_PROC_NULL wrote the buffer");
    tu_poison_status(&st);
    OK(Irecv, r, 4, MPI_INT, MPI_PROC_NULL, 1, W, &req);
    OK(Wait, &req, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    tu_poison_status(&st);
    OK(Sendrecv, v, 4, MPI_INT, MPI_PROC_NULL, 1, r, 4, MPI_INT, MPI_PROC_NULL, 1, W, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    tu_poison_status(&st);
    OK(Sendrecv_replace, r, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_PROC_NULL, 1, W, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    CHECK_POISON(r, 4 * sizeof(int), "MPI_PROC_NULL receive wrote the buffer");
    tu_poison_status(&st);
    OK(Probe, MPI_PROC_NULL, 1, W, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    tu_poison_status(&st);
    OK(Iprobe, MPI_PROC_NULL, 1, W, &flag, &st);
    CHECK(flag == 1);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    msg = MPI_MESSAGE_NULL;
    tu_poison_status(&st);
    OK(Mprobe, MPI_PROC_NULL, 1, W, &msg, &st);
    CHECK(msg == MPI_MESSAGE_NO_PROC, "Mprobe(MPI_PROC_NULL) message is not MPI_MESSAGE_NO_PROC");
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    tu_poison_status(&st);
    OK(Mrecv, r, 4, MPI_INT, &msg, &st);
    CHECK(msg == MPI_MESSAGE_NULL);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    msg = MPI_MESSAGE_NULL;
    flag = -1;
    OK(Improbe, MPI_PROC_NULL, 1, W, &flag, &msg, &st);
    CHECK(flag == 1 && msg == MPI_MESSAGE_NO_PROC);
    OK(Imrecv, r, 4, MPI_INT, &msg, &req);
    CHECK(msg == MPI_MESSAGE_NULL);
    tu_poison_status(&st);
    OK(Wait, &req, &st);
    CHECK_EMPTY_STATUS(st, MPI_PROC_NULL);
    CHECK_POISON(r, 4 * sizeof(int), "MPI_PROC_NULL receive wrote the buffer");
    tu_free(r);
}

static void t_sendrecv(void)
{
    char mn[160];
    for (int k = 0; k < NMSG; k++) {
        const msg_t *m = &MSGS[k];
        int salt = 200 + k, stag = 500 + R, rtag = 500 + prev;
        int *s = make_send(m, R, salt);
        rimg_t x = make_recv(m, prev, salt);
        MPI_Status st;
        tu_poison_status(&st);
        OK(Sendrecv, s, m->sc, m->st->type, next, stag, x.buf, m->rc, m->rt->type, k % 2 ? MPI_ANY_SOURCE : prev,
           k % 3 ? rtag : MPI_ANY_TAG, W, &st);
        CHECK_RIMG(x, "MPI_Sendrecv %s", mname(m, mn, sizeof(mn)));
        CHECK_STATUS(st, prev, rtag, m->rt->type, m->rgot);
        rimg_free(&x);
        tu_free(s);
    }
    /* Sendrecv_replace: the buffer's layout is both sides; vector gaps stay poisoned */
    const mtype_t *types[3] = {&M_INT, &M_VEC, &M_DBL};
    const int counts[3] = {500, 4, 9};
    for (int t = 0; t < 3; t++) {
        for (int big = 0; big < 2; big++) {
            int n = counts[t] * (big ? 200 : 1), salt = 300 + t;
            rimg_t x = rimg_new((long)n * types[t]->ext);
            mt_place(types[t], x.buf, n, R, salt);
            mt_place(types[t], x.img, n, prev, salt);
            MPI_Status st;
            tu_poison_status(&st);
            OK(Sendrecv_replace, x.buf, n, types[t]->type, next, 600 + R, t % 2 ? MPI_ANY_SOURCE : prev, 600 + prev, W,
               &st);
            CHECK_RIMG(x, "MPI_Sendrecv_replace %d %s", n, types[t]->name);
            CHECK_STATUS(st, prev, 600 + prev, types[t]->type, n);
            rimg_free(&x);
        }
    }
}

/* Probe/Iprobe see the envelope without receiving; Mprobe/Improbe take the message out of
 * matching, so a later receive gets the next one. */
static void t_probe(void)
{
    MPI_Status st;
    int flag = -1, cnt = -1;
    /* Probe: the size comes from the status */
    int n = 10 + 3 * R, tag = 700 + R;
    int *s = (int *)tu_alloc(50 * sizeof(int));
    mt_place(&M_INT, s, n, R, 1);
    MPI_Request sr;
    OK(Isend, s, n, MPI_INT, next, tag, W, &sr);
    tu_poison_status(&st);
    OK(Probe, prev, MPI_ANY_TAG, W, &st);
    CHECK_STATUS(st, prev, 700 + prev, MPI_INT, 10 + 3 * prev);
    tu_poison_status(&st);
    OK(Probe, MPI_ANY_SOURCE, 700 + prev, W, &st); /* probing twice sees the same message */
    CHECK_STATUS(st, prev, 700 + prev, MPI_INT, 10 + 3 * prev);
    MPI_Get_count(&st, MPI_INT, &cnt);
    rimg_t x = rimg_new(cnt > 0 && cnt < 50 ? cnt : 1);
    mt_place(&M_INT, x.img, 10 + 3 * prev, prev, 1);
    OK(Recv, x.buf, cnt, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, W, MPI_STATUS_IGNORE);
    CHECK_RIMG(x, "receive after MPI_Probe");
    rimg_free(&x);
    OK(Wait, &sr, MPI_STATUS_IGNORE);

    /* Iprobe: false for a message never sent and before the sender sends */
    OK(Iprobe, MPI_ANY_SOURCE, 999, W, &flag, &st);
    CHECK(flag == 0, "Iprobe found a message that was never sent");
    OK(Barrier, W);
    OK(Isend, s, n, MPI_INT, next, tag + 1, W, &sr);
    flag = 0;
    while (!flag) OK(Iprobe, prev, 701 + prev, W, &flag, &st);
    CHECK_STATUS(st, prev, 701 + prev, MPI_INT, 10 + 3 * prev);
    x = rimg_new(10 + 3 * prev);
    mt_place(&M_INT, x.img, 10 + 3 * prev, prev, 1);
    OK(Recv, x.buf, 10 + 3 * prev, MPI_INT, prev, 701 + prev, W, &st);
    CHECK_RIMG(x, "receive after MPI_Iprobe");
    rimg_free(&x);
    OK(Wait, &sr, MPI_STATUS_IGNORE);
    OK(Barrier, W); /* the Iprobe(999) above must not see later traffic: none uses tag 999 */

    /* Mprobe: two messages, same envelope. Mprobe takes the first; Recv gets the second;
     * Mrecv the first. */
    int *s2 = (int *)tu_alloc(80 * sizeof(int));
    mt_place(&M_INT, s2, 20, R, 2);
    MPI_Request sr2[2];
    OK(Isend, s, 7, MPI_INT, next, 800, W, &sr2[0]);
    OK(Isend, s2, 20, MPI_INT, next, 800, W, &sr2[1]);
    MPI_Message msg = MPI_MESSAGE_NULL;
    tu_poison_status(&st);
    OK(Mprobe, prev, 800, W, &msg, &st);
    CHECK(msg != MPI_MESSAGE_NULL && msg != MPI_MESSAGE_NO_PROC);
    CHECK_STATUS(st, prev, 800, MPI_INT, 7);
    x = rimg_new(30);
    mt_place(&M_INT, x.img, 20, prev, 2);
    OK(Recv, x.buf, 30, MPI_INT, prev, 800, W, &st);
    CHECK_STATUS(st, prev, 800, MPI_INT, 20);
    CHECK_RIMG(x, "MPI_Recv after MPI_Mprobe took the first message");
    rimg_free(&x);
    x = rimg_new(30);
    mt_place(&M_INT, x.img, 7, prev, 1);
    tu_poison_status(&st);
    OK(Mrecv, x.buf, 30, MPI_INT, &msg, &st);
    CHECK(msg == MPI_MESSAGE_NULL, "Mrecv did not reset the message handle");
    CHECK_STATUS(st, prev, 800, MPI_INT, 7);
    CHECK_RIMG(x, "MPI_Mrecv");
    rimg_free(&x);
    OK(Waitall, 2, sr2, MPI_STATUSES_IGNORE);

    /* Improbe + Imrecv, with a vector receive type */
    OK(Barrier, W);
    flag = -1;
    OK(Improbe, MPI_ANY_SOURCE, 801, W, &flag, &msg, &st);
    CHECK(flag == 0, "Improbe found a message not sent yet");
    OK(Barrier, W);
    mt_place(&M_INT, s2, 12, R, 3);
    OK(Isend, s2, 12, MPI_INT, next, 801, W, &sr);
    flag = 0;
    while (!flag) OK(Improbe, MPI_ANY_SOURCE, 801, W, &flag, &msg, &st);
    CHECK_STATUS(st, prev, 801, MPI_INT, 12);
    x = rimg_new(3 * 12);
    mt_place(&M_VEC, x.img, 2, prev, 3);
    MPI_Request rr = MPI_REQUEST_NULL;
    OK(Imrecv, x.buf, 3, T_VEC, &msg, &rr);
    CHECK(msg == MPI_MESSAGE_NULL, "Imrecv did not reset the message handle");
    tu_poison_status(&st);
    OK(Wait, &rr, &st);
    CHECK_STATUS(st, prev, 801, T_VEC, 2);
    CHECK_RIMG(x, "MPI_Imrecv into a vector type");
    rimg_free(&x);
    OK(Wait, &sr, MPI_STATUS_IGNORE);
    tu_free(s), tu_free(s2);
}

/* Every other rank sends to rank 0 (size 3q+1, tag 900+q); rank 0 receives what it probes
 * from any source with any tag. */
static void t_probe_any_source(void)
{
    if (R != 0) {
        int n = 3 * R + 1, *s = (int *)tu_alloc(n * sizeof(int));
        mt_place(&M_INT, s, n, R, 4);
        OK(Send, s, n, MPI_INT, 0, 900 + R, W);
        tu_free(s);
        OK(Barrier, W); /* no other traffic to rank 0 while it probes any source, any tag */
        return;
    }
    int *seen = (int *)calloc(P, sizeof(int));
    for (int j = 1; j < P; j++) {
        MPI_Status st;
        int cnt = -1;
        OK(Probe, MPI_ANY_SOURCE, MPI_ANY_TAG, W, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        int q = st.MPI_SOURCE;
        CHECK(q > 0 && q < P && st.MPI_TAG == 900 + q && cnt == 3 * q + 1, "probed source %d tag %d count %d", q,
              st.MPI_TAG, cnt);
        if (!(q > 0 && q < P && cnt == 3 * q + 1)) break;
        CHECK(!seen[q]++, "source %d probed twice", q);
        rimg_t x = rimg_new(cnt);
        mt_place(&M_INT, x.img, cnt, q, 4);
        OK(Recv, x.buf, cnt, MPI_INT, q, st.MPI_TAG, W, &st);
        CHECK_STATUS(st, q, 900 + q, MPI_INT, cnt);
        CHECK_RIMG(x, "message from %d found by MPI_Probe(MPI_ANY_SOURCE)", q);
        rimg_free(&x);
    }
    free(seen);
    OK(Barrier, W);
}

/* Persistent requests: started three times (Startall, Start, Startall + Testall), with new
 * data each time; inactive between starts; Wait on an inactive request returns the empty
 * status; Request_free releases them. */
static void t_persistent(void)
{
    for (int k = 0; k < NMSG; k += 2) {
        const msg_t *m = &MSGS[k];
        char mn[160];
        int *s = (int *)tu_alloc(mt_bytes(m->st, m->sc) + 4);
        rimg_t x = rimg_new((long)m->rc * m->rt->ext + 1);
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        OK(Recv_init, x.buf, m->rc, m->rt->type, prev, 1000 + k, W, &req[0]);
        OK(Send_init, s, m->sc, m->st->type, next, 1000 + k, W, &req[1]);
        CHECK(req[0] != MPI_REQUEST_NULL && req[1] != MPI_REQUEST_NULL);
        MPI_Status st[2];
        tu_poison_status(&st[0]);
        OK(Wait, &req[0], &st[0]); /* not started yet: inactive */
        CHECK(req[0] != MPI_REQUEST_NULL, "Wait freed an inactive persistent request");
        CHECK_EMPTY_STATUS(st[0], MPI_ANY_SOURCE);
        for (int it = 0; it < 3; it++) {
            mt_place(m->st, s, m->sc, R, 40 + it);
            tu_repoison(x.buf);
            tu_repoison(x.img);
            mt_place(m->rt, x.img, m->rgot, prev, 40 + it);
            tu_poison_status(&st[0]);
            if (it == 0) {
                OK(Startall, 2, req);
                OK(Waitall, 2, req, st);
            } else if (it == 1) {
                OK(Start, &req[0]);
                OK(Start, &req[1]);
                OK(Wait, &req[1], &st[1]);
                OK(Wait, &req[0], &st[0]);
            } else {
                int flag = 0;
                OK(Startall, 2, req);
                while (!flag) OK(Testall, 2, req, &flag, st);
            }
            CHECK(req[0] != MPI_REQUEST_NULL && req[1] != MPI_REQUEST_NULL, "a persistent request was freed by its completion");
            CHECK_RIMG(x, "persistent start %d: %s", it, mname(m, mn, sizeof(mn)));
            CHECK_STATUS(st[0], prev, 1000 + k, m->rt->type, m->rgot);
        }
        OK(Request_free, &req[0]);
        OK(Request_free, &req[1]);
        CHECK(req[0] == MPI_REQUEST_NULL && req[1] == MPI_REQUEST_NULL);
        rimg_free(&x);
        tu_free(s);
    }
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, MPI_THREAD_FUNNELED);
    tu_ring(&R, &P, &next, &prev);
    tu_types_create();
    msgs_init();

    /* buffered mode: room for the largest message a few times over */
    int packsz = 0;
    MPI_Pack_size(100000, MPI_INT, W, &packsz);
    int bsize = 2 * (packsz + MPI_BSEND_OVERHEAD) + 64 * 1024;
    void *bbuf = malloc(bsize);
    MPI_Buffer_attach(bbuf, bsize);

    t_modes();
    t_order();
    t_proc_null();
    t_sendrecv();
    t_probe();
    t_probe_any_source();
    t_persistent();

    void *dbuf = NULL;
    int dsize = -1;
    MPI_Buffer_detach(&dbuf, &dsize);
    CHECK(dbuf == bbuf && dsize == bsize, "Buffer_detach gave %p %d, attached %p %d", dbuf, dsize, bbuf, bsize);
    free(bbuf);
    tu_types_free();
    return tu_finalize();
}
