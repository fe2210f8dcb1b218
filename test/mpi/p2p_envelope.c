/* p2p_envelope: the cases of point-to-point envelopes (NCCLMPI_P2P_ENVELOPE=host) that random
 * traffic rarely meets, between rank 0 and rank 1 (others idle):
 *   - a raw message of exactly the envelope's size (WIRE bytes): delivered as sent, probed and not;
 *   - order: an older message of another tag, then an envelope; the receiver probes the envelope's
 *     tag first, then receives by MPI_ANY_TAG: it must get the older message first;
 *   - MPI_Mprobe/MPI_Mrecv and MPI_Improbe/MPI_Imrecv of envelopes and of raw messages behind them;
 *   - truncation of an envelope's payload (MPI_ERR_TRUNCATE, MPI_ERRORS_RETURN);
 *   - a non-contiguous receive datatype getting an envelope;
 *   - persistent receives of messages a probe took out of matching, and restarted on envelopes;
 *   - nonblocking receives of envelopes (their requests are the real MPI's, decoded when they
 *     complete): MPI_Request_get_status before MPI_Wait, MPI_Request_free while active,
 *     MPI_Waitany and MPI_Testsome without statuses, a truncation in MPI_Waitall
 *     (MPI_ERR_IN_STATUS), MPI_Cancel of an unmatched one;
 *   - receives with room for fewer bytes than an envelope (which ncclmpi leaves to the real MPI):
 *     an envelope there is MPI_ERR_TRUNCATE, blocking and not, and the next message of the same
 *     tag, that fits, still arrives intact;
 *   - a message a probe took out of matching and nothing received, its communicator freed: a new
 *     communicator (which may get the freed one's handle) never gets it.
 * Every message's bytes and status are checked. Runs without envelopes too (plain MPI semantics).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, failures;
#define CHECK(c, ...)                                                        \
    do {                                                                     \
        if (!(c)) {                                                          \
            fprintf(stderr, "[rank %d] FAIL line %d: ", rank, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            failures++;                                                      \
        }                                                                    \
    } while (0)

enum { BIG = 5000, WIRE = 416 }; /* WIRE: an envelope's size on the wire (NM_ENV_WIRE) */ /* ints: 20000 bytes, sent as an envelope with NCCLMPI_P2P_ENVELOPE_MIN <= 20000 */

static void fill(int *p, int n, int salt)
{
    for (int i = 0; i < n; i++) p[i] = salt * 100000 + i;
}

static int check_ints(const int *p, int n, int salt)
{
    for (int i = 0; i < n; i++)
        if (p[i] != salt * 100000 + i) return i;
    return -1;
}

static int count_of(MPI_Status *st, MPI_Datatype t)
{
    int c = -1;
    MPI_Get_count(st, t, &c);
    return c;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int *a = malloc(BIG * sizeof(int)), *b = malloc((BIG + 16) * sizeof(int));
    unsigned char raw[WIRE], got[WIRE + 3];
    for (int i = 0; i < WIRE; i++) raw[i] = (unsigned char)(i * 7 + 3);
    MPI_Status st;
    if (size >= 2 && rank == 0) {
        /* nonblocking sends, completed at the end: the receiver takes them out of order (probes),
         * which blocking sends of large messages would not allow without buffering */
        MPI_Request q[16];
        int nq = 0;
        int *bufs[6];
        for (int k = 0; k < 6; k++) bufs[k] = malloc(BIG * sizeof(int));
        /* 1. raw messages of the envelope's size, then an older-message/envelope pair, then Mprobe cases */
        MPI_Isend(raw, WIRE, MPI_BYTE, 1, 1, c, &q[nq++]);
        MPI_Isend(raw, WIRE, MPI_BYTE, 1, 2, c, &q[nq++]);
        fill(bufs[0], BIG, 3);
        MPI_Isend(bufs[0], 100, MPI_INT, 1, 3, c, &q[nq++]); /* older, tag 3 */
        MPI_Isend(bufs[0], BIG, MPI_INT, 1, 4, c, &q[nq++]); /* envelope, tag 4 */
        fill(bufs[1], BIG, 5);
        MPI_Isend(bufs[1], BIG, MPI_INT, 1, 5, c, &q[nq++]); /* envelope for Mprobe */
        MPI_Isend(raw, WIRE, MPI_BYTE, 1, 6, c, &q[nq++]);  /* a raw message of the envelope's size behind it */
        fill(bufs[2], BIG, 7);
        MPI_Isend(bufs[2], BIG, MPI_INT, 1, 7, c, &q[nq++]); /* for Improbe/Imrecv */
        MPI_Isend(bufs[2], BIG, MPI_INT, 1, 8, c, &q[nq++]); /* truncated at the receiver */
        fill(bufs[3], BIG, 9);
        MPI_Isend(bufs[3], BIG, MPI_INT, 1, 9, c, &q[nq++]); /* into a vector type */
        fill(bufs[4], BIG, 10);
        MPI_Isend(bufs[4], BIG, MPI_INT, 1, 10, c, &q[nq++]); /* envelope for a persistent receive, after a probe */
        fill(bufs[5], BIG, 11);
        MPI_Isend(bufs[5], 100, MPI_INT, 1, 11, c, &q[nq++]); /* raw, probed */
        MPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        fill(a, BIG, 12);
        for (int k = 0; k < 3; k++) MPI_Send(a, BIG, MPI_INT, 1, 12, c); /* a persistent receive restarted */
        /* 8. for nonblocking receives: tags 13..20 (15: one int, after 14) */
        int *nb[8];
        nq = 0;
        for (int k = 0; k < 8; k++) {
            nb[k] = malloc(BIG * sizeof(int));
            fill(nb[k], BIG, 13 + k);
            MPI_Isend(nb[k], 13 + k == 15 ? 1 : BIG, MPI_INT, 1, 13 + k, c, &q[nq++]);
        }
        MPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        /* 9. into receives too small for an envelope (tags 21, 22), then one that fits (tag 21) */
        fill(a, BIG, 21);
        MPI_Send(a, BIG, MPI_INT, 1, 21, c);
        MPI_Send(a, BIG, MPI_INT, 1, 22, c);
        MPI_Send(a, 8, MPI_INT, 1, 21, c);
        for (int k = 0; k < 8; k++) free(nb[k]);
        for (int k = 0; k < 6; k++) free(bufs[k]);
    } else if (size >= 2 && rank == 1) {
        /* 1a. Probe of a raw message of the envelope's size: its size, then its bytes */
        MPI_Probe(0, 1, c, &st);
        CHECK(count_of(&st, MPI_BYTE) == WIRE && st.MPI_TAG == 1, "Probe raw WIRE: count %d tag %d", count_of(&st, MPI_BYTE), st.MPI_TAG);
        memset(got, 0, sizeof(got));
        MPI_Recv(got, WIRE + 3, MPI_BYTE, 0, 1, c, &st);
        CHECK(!memcmp(got, raw, WIRE) && count_of(&st, MPI_BYTE) == WIRE, "raw WIRE after Probe: bytes or count %d", count_of(&st, MPI_BYTE));
        /* 1b. without a probe */
        memset(got, 0, sizeof(got));
        MPI_Recv(got, WIRE + 3, MPI_BYTE, 0, 2, c, &st);
        CHECK(!memcmp(got, raw, WIRE) && count_of(&st, MPI_BYTE) == WIRE, "raw WIRE: bytes or count %d", count_of(&st, MPI_BYTE));
        /* 2. probe the envelope's tag first; MPI_ANY_TAG must then get the older tag-3 message */
        MPI_Probe(0, 4, c, &st);
        CHECK(count_of(&st, MPI_INT) == BIG, "Probe of an envelope: count %d", count_of(&st, MPI_INT));
        MPI_Recv(b, BIG, MPI_INT, 0, MPI_ANY_TAG, c, &st);
        CHECK(st.MPI_TAG == 3 && count_of(&st, MPI_INT) == 100 && check_ints(b, 100, 3) < 0,
              "ANY_TAG after a probe of a newer envelope: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        MPI_Recv(b, BIG, MPI_INT, 0, MPI_ANY_TAG, c, &st);
        CHECK(st.MPI_TAG == 4 && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 3) < 0, "the envelope: tag %d count %d",
              st.MPI_TAG, count_of(&st, MPI_INT));
        /* 3. Mprobe + Mrecv of an envelope, then of the raw message behind it */
        MPI_Message m;
        MPI_Mprobe(0, MPI_ANY_TAG, c, &m, &st);
        CHECK(st.MPI_TAG == 5 && count_of(&st, MPI_INT) == BIG, "Mprobe envelope: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        memset(b, 0, BIG * sizeof(int));
        MPI_Mrecv(b, BIG, MPI_INT, &m, &st);
        CHECK(m == MPI_MESSAGE_NULL && check_ints(b, BIG, 5) < 0 && count_of(&st, MPI_INT) == BIG, "Mrecv envelope: count %d",
              count_of(&st, MPI_INT));
        MPI_Mprobe(0, 6, c, &m, &st);
        CHECK(count_of(&st, MPI_BYTE) == WIRE, "Mprobe raw WIRE: count %d", count_of(&st, MPI_BYTE));
        memset(got, 0, sizeof(got));
        MPI_Mrecv(got, WIRE + 3, MPI_BYTE, &m, &st);
        CHECK(!memcmp(got, raw, WIRE) && count_of(&st, MPI_BYTE) == WIRE, "Mrecv raw WIRE: count %d", count_of(&st, MPI_BYTE));
        /* 4. Improbe + Imrecv */
        int flag = 0;
        while (!flag) MPI_Improbe(0, 7, c, &flag, &m, &st);
        CHECK(count_of(&st, MPI_INT) == BIG, "Improbe: count %d", count_of(&st, MPI_INT));
        MPI_Request q;
        memset(b, 0, BIG * sizeof(int));
        MPI_Imrecv(b, BIG, MPI_INT, &m, &q);
        MPI_Wait(&q, &st);
        CHECK(check_ints(b, BIG, 7) < 0 && count_of(&st, MPI_INT) == BIG && st.MPI_TAG == 7, "Imrecv: count %d tag %d",
              count_of(&st, MPI_INT), st.MPI_TAG);
        /* 5. truncation: 20000 bytes into 4000 */
        int rc = MPI_Recv(b, 1000, MPI_INT, 0, 8, c, &st);
        int cls = 0;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE, "truncated envelope: class %d", cls);
        /* 6. into a vector type: every other int */
        MPI_Datatype vec;
        MPI_Type_vector(BIG, 1, 2, MPI_INT, &vec);
        MPI_Type_commit(&vec);
        int *w = malloc(2 * BIG * sizeof(int));
        for (int i = 0; i < 2 * BIG; i++) w[i] = -1;
        MPI_Recv(w, 1, vec, 0, 9, c, &st);
        int bad = -1;
        for (int i = 0; i < BIG && bad < 0; i++)
            if (w[2 * i] != 9 * 100000 + i || (i + 1 < BIG && w[2 * i + 1] != -1)) bad = i;
        CHECK(bad < 0, "vector receive of an envelope: element %d", bad);
        MPI_Type_free(&vec);
        free(w);
        /* 7. persistent receives: of messages a probe took out of matching (an envelope and a raw
         * one behind it), then restarted on fresh envelopes */
        st.MPI_ERROR = 12345; /* a probe leaves it (MPI-4.1 3.2.5: only multiple completions set it) */
        MPI_Probe(0, 11, c, &st);
        CHECK(count_of(&st, MPI_INT) == 100 && st.MPI_ERROR == 12345, "Probe behind an envelope: count %d error field %d",
              count_of(&st, MPI_INT), st.MPI_ERROR);
        MPI_Request pr;
        MPI_Recv_init(b, BIG + 16, MPI_INT, 0, 10, c, &pr);
        memset(b, 0, BIG * sizeof(int));
        MPI_Start(&pr);
        MPI_Wait(&pr, &st);
        CHECK(st.MPI_TAG == 10 && st.MPI_SOURCE == 0 && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 10) < 0,
              "persistent receive of a probed-out envelope: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        MPI_Request_free(&pr);
        MPI_Recv_init(b, BIG, MPI_INT, 0, MPI_ANY_TAG, c, &pr);
        MPI_Start(&pr);
        MPI_Wait(&pr, &st);
        CHECK(st.MPI_TAG == 11 && count_of(&st, MPI_INT) == 100 && check_ints(b, 100, 11) < 0,
              "persistent receive of a probed raw message: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        for (int k = 0; k < 3; k++) {
            memset(b, 0, BIG * sizeof(int));
            MPI_Start(&pr);
            MPI_Wait(&pr, &st);
            CHECK(st.MPI_TAG == 12 && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 12) < 0,
                  "persistent receive %d: tag %d count %d", k, st.MPI_TAG, count_of(&st, MPI_INT));
        }
        MPI_Request_free(&pr);
        /* 8a. MPI_Request_get_status finds it complete (the payload is there), then MPI_Wait */
        MPI_Request r[3];
        memset(b, 0, BIG * sizeof(int));
        MPI_Irecv(b, BIG, MPI_INT, 0, 13, c, &r[0]);
        for (flag = 0; !flag;) MPI_Request_get_status(r[0], &flag, &st);
        CHECK(st.MPI_TAG == 13 && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 13) < 0,
              "Request_get_status of an envelope: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        MPI_Request_get_status(r[0], &flag, &st); /* again: the same */
        CHECK(flag && st.MPI_TAG == 13 && count_of(&st, MPI_INT) == BIG,
              "a second Request_get_status of an envelope: flag %d tag %d count %d", flag, st.MPI_TAG, count_of(&st, MPI_INT));
        MPI_Wait(&r[0], &st);
        CHECK(r[0] == MPI_REQUEST_NULL && st.MPI_TAG == 13 && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 13) < 0,
              "Wait after Request_get_status: tag %d count %d", st.MPI_TAG, count_of(&st, MPI_INT));
        /* 8b. freed while active: the payload arrives all the same (learnt by a later message,
         * then by testing until it is there, as MPI lets a freed receive complete later) */
        int *f = calloc(BIG, sizeof(int)), one = 0;
        MPI_Irecv(f, BIG, MPI_INT, 0, 14, c, &r[0]);
        MPI_Request_free(&r[0]);
        CHECK(r[0] == MPI_REQUEST_NULL, "Request_free left the handle");
        MPI_Recv(&one, 1, MPI_INT, 0, 15, c, &st);
        const double t0 = MPI_Wtime();
        while (check_ints(f, BIG, 14) >= 0 && MPI_Wtime() - t0 < 10) {
            MPI_Request none = MPI_REQUEST_NULL;
            MPI_Test(&none, &flag, MPI_STATUS_IGNORE);
            MPI_Iprobe(0, 999, c, &flag, MPI_STATUS_IGNORE); /* (a test of a null request may not progress) */
        }
        CHECK(check_ints(f, BIG, 14) < 0, "a receive freed while active: element %d", check_ints(f, BIG, 14));
        free(f);
        /* 8c. MPI_Waitany, then MPI_Testsome, without statuses */
        int *g[3], idx = -1, out = 0, left = 3;
        for (int k = 0; k < 3; k++) {
            g[k] = calloc(BIG, sizeof(int));
            MPI_Irecv(g[k], BIG, MPI_INT, 0, 16 + k, c, &r[k]);
        }
        MPI_Waitany(3, r, &idx, MPI_STATUS_IGNORE);
        CHECK(idx >= 0 && idx < 3 && r[idx] == MPI_REQUEST_NULL && check_ints(g[idx], BIG, 16 + idx) < 0, "Waitany: index %d", idx);
        left--;
        while (left > 0) {
            int ids[3];
            MPI_Testsome(3, r, &out, ids, MPI_STATUSES_IGNORE);
            if (out != MPI_UNDEFINED) left -= out;
        }
        for (int k = 0; k < 3; k++)
            CHECK(r[k] == MPI_REQUEST_NULL && check_ints(g[k], BIG, 16 + k) < 0, "Testsome: receive %d element %d", k,
                  check_ints(g[k], BIG, 16 + k));
        /* 8d. a payload too large for its receive, next to one that fits: MPI_Waitall reports
         * MPI_ERR_IN_STATUS, the truncation in the first one's status */
        MPI_Status sts[2];
        memset(g[0], 0, BIG * sizeof(int));
        MPI_Irecv(b, 1000, MPI_INT, 0, 19, c, &r[0]);
        MPI_Irecv(g[0], BIG, MPI_INT, 0, 20, c, &r[1]);
        rc = MPI_Waitall(2, r, sts);
        int c0 = -1, c1 = -1;
        MPI_Error_class(sts[0].MPI_ERROR, &c0);
        MPI_Error_class(sts[1].MPI_ERROR, &c1);
        if (c1 == MPI_ERR_PENDING) MPI_Wait(&r[1], &sts[1]); /* (Open MPI stops at the first failure) */
        CHECK(rc == MPI_ERR_IN_STATUS && c0 == MPI_ERR_TRUNCATE && (c1 == MPI_SUCCESS || c1 == MPI_ERR_PENDING) &&
              check_ints(g[0], BIG, 20) < 0 && count_of(&sts[1], MPI_INT) == BIG,
              "Waitall with a truncated envelope: rc %d, classes %d %d, count %d, element %d", rc, c0, c1, count_of(&sts[1], MPI_INT), check_ints(g[0], BIG, 20));
        for (int k = 0; k < 3; k++) free(g[k]);
        /* 9. an envelope into a receive with room for 32 bytes: too long, blocking and not.
         * (Open MPI 5.0.11's ob1 writes a truncated rendezvous message past the end of the
         * receive buffer, plain MPI too: the buffer has room for the whole message behind its 32
         * bytes, so that a stack smashed there is not mistaken for ncclmpi's doing) */
        int *small = (int *)malloc((BIG + 8) * sizeof(int));
        rc = MPI_Recv(small, 8, MPI_INT, 0, 21, c, &st);
        MPI_Error_class(rc, &c0);
        CHECK(c0 == MPI_ERR_TRUNCATE, "a 20000-byte message into 32 bytes (blocking): class %d", c0);
        MPI_Irecv(small, 8, MPI_INT, 0, 22, c, &r[0]);
        rc = MPI_Wait(&r[0], &st);
        MPI_Error_class(rc, &c0);
        CHECK(c0 == MPI_ERR_TRUNCATE, "a 20000-byte message into 32 bytes (MPI_Irecv): class %d", c0);
        for (int i = 0; i < 12; i++) small[i] = -1;
        rc = MPI_Recv(small, 8, MPI_INT, 0, 21, c, &st);
        CHECK(rc == MPI_SUCCESS && check_ints(small, 8, 21) < 0 && small[8] == -1 && count_of(&st, MPI_INT) == 8,
              "the 32-byte message after them: rc %d, count %d, element %d", rc, count_of(&st, MPI_INT), check_ints(small, 8, 21));
        free(small);
        /* 8e. cancelled before any message matched it */
        MPI_Irecv(b, BIG, MPI_INT, 0, 99, c, &r[0]);
        MPI_Cancel(&r[0]);
        MPI_Wait(&r[0], &st);
        MPI_Test_cancelled(&st, &flag);
        CHECK(flag, "a cancelled receive is not reported cancelled");
    }
    /* 10. a message that a probe took out of matching (it came before the probed envelope) and
     * that nothing received, on a communicator freed then: a communicator made after it, which may
     * get the same handle, never gets that message. (With envelopes only: a send of 20000 bytes
     * that is never received completes only as an envelope.) */
    const char *mode = getenv("NCCLMPI_P2P_ENVELOPE");
    if (size >= 2 && mode && !strcmp(mode, "host")) {
        MPI_Comm d, e;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        if (rank == 0) {
            fill(a, BIG, 30);
            MPI_Send(a, BIG, MPI_INT, 1, 2, d);
            MPI_Send(a, BIG, MPI_INT, 1, 1, d);
        } else if (rank == 1) {
            MPI_Probe(0, 1, d, &st);
            int rr = MPI_Recv(b, BIG, MPI_INT, 0, 1, d, &st);
            CHECK(rr == MPI_SUCCESS && check_ints(b, BIG, 30) < 0, "the probed message: rc %d", rr);
        }
        const MPI_Comm old = d;
        MPI_Comm_free(&d);
        /* (duplicates until rank 1 gets the freed handle again, or 32 tries: the others are freed) */
        MPI_Comm spare[32];
        int nspare = 0, same = 0;
        for (;;) {
            MPI_Comm_dup(MPI_COMM_WORLD, &e);
            same = e == old;
            MPI_Bcast(&same, 1, MPI_INT, 1, MPI_COMM_WORLD);
            if (same || nspare == 32) break;
            spare[nspare++] = e;
        }
        for (int k = 0; k < nspare; k++) MPI_Comm_free(&spare[k]);
        if (rank == 0) {
            fill(a, BIG, 31);
            MPI_Send(a, BIG, MPI_INT, 1, 2, e);
        } else if (rank == 1) {
            for (int i = 0; i < BIG; i++) b[i] = -1;
            int rr = MPI_Recv(b, BIG, MPI_INT, 0, 2, e, &st);
            CHECK(rr == MPI_SUCCESS && count_of(&st, MPI_INT) == BIG && check_ints(b, BIG, 31) < 0,
                  "a message on a new communicator%s: rc %d, count %d, element %d is %d (salt 30: the freed one's)",
                  e == old ? " (with the freed one's handle)" : "", rr, count_of(&st, MPI_INT), check_ints(b, BIG, 31),
                  b[0]);
        }
        if (rank == 1 && !same) printf("p2p_envelope: no communicator got the freed one's handle again\n");
        MPI_Comm_free(&e);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("p2p_envelope: %d failure(s)\n", total);
    free(a);
    free(b);
    MPI_Comm_free(&c);
    MPI_Finalize();
    return total ? 1 : 0;
}
