/* Error behaviour with host buffers: invalid arguments give the same error class, through the
 * same error handler, with and without ncclmpi. The classes asserted here are those Open MPI
 * 4.1 returns without ncclmpi (the test passes in plain mode); that the same binary passes
 * with ncclmpi preloaded or linked proves the wrappers change none of them.
 *
 * Two passes over the same cases, on D (a duplicate of MPI_COMM_WORLD):
 *   1. MPI_ERRORS_RETURN on D and on MPI_COMM_WORLD: check the returned error class;
 *   2. counting error handlers (MPI_Comm_create_errhandler) on D and MPI_COMM_WORLD: check
 *      that exactly the right one ran, once, with the communicator and the code returned.
 * Errors of calls on MPI_COMM_NULL, and of calls with no communicator (null requests and
 * messages), are raised on MPI_COMM_WORLD's handler. Afterwards both communicators work.
 *
 * `errors --fatal`: under the default MPI_ERRORS_ARE_FATAL an invalid MPI_Allreduce must abort
 * the job (tests.cmake looks for Open MPI's message, and fails on "SURVIVED").
 */
#include "common.h"

static int R, P, next, prev;
static MPI_Comm D;

/* ---- counting error handlers ------------------------------------------------------------ */
typedef struct {
    int calls, code;
    MPI_Comm comm;
} eh_rec_t;
static eh_rec_t EH_W, EH_D;
static int handlers_on;
static void eh_world(MPI_Comm *c, int *code, ...)
{
    EH_W.calls++;
    EH_W.comm = *c;
    EH_W.code = *code;
}
static void eh_dup(MPI_Comm *c, int *code, ...)
{
    EH_D.calls++;
    EH_D.comm = *c;
    EH_D.code = *code;
}
static void eh_reset(void)
{
    memset(&EH_W, 0, sizeof(EH_W));
    memset(&EH_D, 0, sizeof(EH_D));
    EH_W.comm = EH_D.comm = MPI_COMM_NULL;
}

static const char *class_name(int c)
{
    switch (c) {
#define N(x) case x: return #x;
        N(MPI_SUCCESS) N(MPI_ERR_BUFFER) N(MPI_ERR_COUNT) N(MPI_ERR_TYPE) N(MPI_ERR_TAG) N(MPI_ERR_COMM)
        N(MPI_ERR_RANK) N(MPI_ERR_REQUEST) N(MPI_ERR_ROOT) N(MPI_ERR_GROUP) N(MPI_ERR_OP) N(MPI_ERR_TOPOLOGY)
        N(MPI_ERR_DIMS) N(MPI_ERR_ARG) N(MPI_ERR_UNKNOWN) N(MPI_ERR_TRUNCATE) N(MPI_ERR_OTHER) N(MPI_ERR_INTERN)
        N(MPI_ERR_IN_STATUS) N(MPI_ERR_PENDING) N(MPI_ERR_INFO) N(MPI_ERR_UNSUPPORTED_OPERATION)
#undef N
    default: return "?";
    }
}

/* which handler must run: on D, or on MPI_COMM_WORLD */
enum { ON_D, ON_W };

/* hcls: the class of the code the handler receives, when it is not the code returned (Open
 * MPI passes the status's code to the handler and returns MPI_ERR_IN_STATUS) */
static int expect_h(const char *file, int line, const char *fn, int cls, int hcls, int on, int rc);
static int expect(const char *file, int line, const char *fn, int cls, int on, int rc)
{
    return expect_h(file, line, fn, cls, -1, on, rc);
}
static int expect_h(const char *file, int line, const char *fn, int cls, int hcls, int on, int rc)
{
    int got = -1;
    tu.checks++;
    if (rc == MPI_SUCCESS) {
        tu_fail(file, line, fn, "succeeded; expected %s", class_name(cls));
        return 0;
    }
    MPI_Error_class(rc, &got);
    if (got != cls) tu_fail(file, line, fn, "error class %d %s, expected %d %s", got, class_name(got), cls, class_name(cls));
    if (handlers_on) {
        eh_rec_t *want = on == ON_D ? &EH_D : &EH_W, *other = on == ON_D ? &EH_W : &EH_D;
        MPI_Comm wc = on == ON_D ? D : MPI_COMM_WORLD;
        tu.checks++;
        if (want->calls != 1 || other->calls != 0)
            tu_fail(file, line, fn, "error handler of %s ran %d times, of %s %d times; expected once on %s",
                    on == ON_D ? "D" : "MPI_COMM_WORLD", want->calls, on == ON_D ? "MPI_COMM_WORLD" : "D", other->calls,
                    on == ON_D ? "D" : "MPI_COMM_WORLD");
        else {
            int hc = -2;
            MPI_Error_class(want->code, &hc);
            if ((hcls < 0 ? want->code != rc : hc != hcls) || want->comm != wc)
                tu_fail(file, line, fn, "error handler got code %d (class %s; returned %d) and %s communicator",
                        want->code, class_name(hc), rc, want->comm == wc ? "the right" : "another");
        }
    }
    return got == cls;
}
#define ERR(cls, on, fn, ...) expect(__FILE__, __LINE__, "MPI_" #fn, cls, on, (eh_reset(), CALL(fn, __VA_ARGS__)))
#define ERRH(cls, hcls, on, fn, ...)                                                              \
    expect_h(__FILE__, __LINE__, "MPI_" #fn, cls, hcls, on, (eh_reset(), CALL(fn, __VA_ARGS__)))

/* ---- the cases ------------------------------------------------------------------------------ */
static void t_args(void)
{
    int sb[64], rb[64], one[64], zero[64];
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Comm nc = MPI_COMM_NULL;
    MPI_Datatype tnull[64];
    int flag;
    for (int i = 0; i < 64; i++) {
        sb[i] = ival(R, i);
        one[i] = 1;
        zero[i] = i;
        tnull[i] = MPI_DATATYPE_NULL;
    }
    MPI_Datatype tint[64];
    for (int i = 0; i < 64; i++) tint[i] = MPI_INT;
    int bad = P, badneg = -7;

    /* negative counts: MPI_ERR_COUNT */
    ERR(MPI_ERR_COUNT, ON_D, Allreduce, sb, rb, -1, MPI_INT, MPI_SUM, D);
    ERR(MPI_ERR_COUNT, ON_D, Iallreduce, sb, rb, -1, MPI_INT, MPI_SUM, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Reduce, sb, rb, -1, MPI_INT, MPI_SUM, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Ireduce, sb, rb, -1, MPI_INT, MPI_SUM, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Bcast, sb, -1, MPI_INT, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Ibcast, sb, -1, MPI_INT, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Allgather, sb, -1, MPI_INT, rb, 1, MPI_INT, D);
    ERR(MPI_ERR_COUNT, ON_D, Iallgather, sb, 1, MPI_INT, rb, -1, MPI_INT, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Allgatherv, sb, -1, MPI_INT, rb, one, zero, MPI_INT, D);
    ERR(MPI_ERR_COUNT, ON_D, Iallgatherv, sb, -1, MPI_INT, rb, one, zero, MPI_INT, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Alltoall, sb, 1, MPI_INT, rb, -1, MPI_INT, D);
    ERR(MPI_ERR_COUNT, ON_D, Ialltoall, sb, -1, MPI_INT, rb, 1, MPI_INT, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Gather, sb, -1, MPI_INT, rb, 1, MPI_INT, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Igather, sb, -1, MPI_INT, rb, 1, MPI_INT, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Scatter, sb, 1, MPI_INT, rb, -1, MPI_INT, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Iscatter, sb, 1, MPI_INT, rb, -1, MPI_INT, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Scan, sb, rb, -1, MPI_INT, MPI_SUM, D);
    ERR(MPI_ERR_COUNT, ON_D, Iscan, sb, rb, -1, MPI_INT, MPI_SUM, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Exscan, sb, rb, -1, MPI_INT, MPI_SUM, D);
    ERR(MPI_ERR_COUNT, ON_D, Iexscan, sb, rb, -1, MPI_INT, MPI_SUM, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Reduce_scatter_block, sb, rb, -1, MPI_INT, MPI_SUM, D);
    ERR(MPI_ERR_COUNT, ON_D, Ireduce_scatter_block, sb, rb, -1, MPI_INT, MPI_SUM, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Send, sb, -1, MPI_INT, next, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Ssend, sb, -1, MPI_INT, next, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Bsend, sb, -1, MPI_INT, next, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Rsend, sb, -1, MPI_INT, next, 0, D);
    ERR(MPI_ERR_COUNT, ON_D, Isend, sb, -1, MPI_INT, next, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Issend, sb, -1, MPI_INT, next, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Ibsend, sb, -1, MPI_INT, next, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Irsend, sb, -1, MPI_INT, next, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Recv, rb, -1, MPI_INT, prev, 0, D, &st);
    ERR(MPI_ERR_COUNT, ON_D, Irecv, rb, -1, MPI_INT, prev, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Send_init, sb, -1, MPI_INT, next, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Recv_init, rb, -1, MPI_INT, prev, 0, D, &req);
    ERR(MPI_ERR_COUNT, ON_D, Sendrecv, sb, -1, MPI_INT, next, 0, rb, 1, MPI_INT, prev, 0, D, &st);
    ERR(MPI_ERR_COUNT, ON_D, Sendrecv_replace, rb, -1, MPI_INT, next, 0, prev, 0, D, &st);

    /* roots out of range: MPI_ERR_ROOT */
    ERR(MPI_ERR_ROOT, ON_D, Reduce, sb, rb, 1, MPI_INT, MPI_SUM, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Reduce, sb, rb, 1, MPI_INT, MPI_SUM, badneg, D);
    ERR(MPI_ERR_ROOT, ON_D, Ireduce, sb, rb, 1, MPI_INT, MPI_SUM, bad, D, &req);
    ERR(MPI_ERR_ROOT, ON_D, Bcast, sb, 1, MPI_INT, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Ibcast, sb, 1, MPI_INT, badneg, D, &req);
    ERR(MPI_ERR_ROOT, ON_D, Gather, sb, 1, MPI_INT, rb, 1, MPI_INT, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Igather, sb, 1, MPI_INT, rb, 1, MPI_INT, bad, D, &req);
    ERR(MPI_ERR_ROOT, ON_D, Gatherv, sb, 1, MPI_INT, rb, one, zero, MPI_INT, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Igatherv, sb, 1, MPI_INT, rb, one, zero, MPI_INT, badneg, D, &req);
    ERR(MPI_ERR_ROOT, ON_D, Scatter, sb, 1, MPI_INT, rb, 1, MPI_INT, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Iscatter, sb, 1, MPI_INT, rb, 1, MPI_INT, bad, D, &req);
    ERR(MPI_ERR_ROOT, ON_D, Scatterv, sb, one, zero, MPI_INT, rb, 1, MPI_INT, bad, D);
    ERR(MPI_ERR_ROOT, ON_D, Iscatterv, sb, one, zero, MPI_INT, rb, 1, MPI_INT, bad, D, &req);

    /* MPI_DATATYPE_NULL: MPI_ERR_TYPE */
    ERR(MPI_ERR_TYPE, ON_D, Bcast, sb, 1, MPI_DATATYPE_NULL, 0, D);
    /* Open MPI 4.1 checks the op against the type first: reductions answer MPI_ERR_OP */
    ERR(MPI_ERR_OP, ON_D, Allreduce, sb, rb, 1, MPI_DATATYPE_NULL, MPI_SUM, D);
    ERR(MPI_ERR_OP, ON_D, Iallreduce, sb, rb, 1, MPI_DATATYPE_NULL, MPI_SUM, D, &req);
    ERR(MPI_ERR_TYPE, ON_D, Alltoall, sb, 1, MPI_DATATYPE_NULL, rb, 1, MPI_INT, D);
    ERR(MPI_ERR_TYPE, ON_D, Alltoallv, sb, one, zero, MPI_DATATYPE_NULL, rb, one, zero, MPI_INT, D);
    ERR(MPI_ERR_TYPE, ON_D, Ialltoallv, sb, one, zero, MPI_INT, rb, one, zero, MPI_DATATYPE_NULL, D, &req);
    ERR(MPI_ERR_TYPE, ON_D, Alltoallw, sb, one, zero, tnull, rb, one, zero, tint, D);
    ERR(MPI_ERR_TYPE, ON_D, Ialltoallw, sb, one, zero, tint, rb, one, zero, tnull, D, &req);
    ERR(MPI_ERR_OP, ON_D, Reduce_scatter, sb, rb, one, MPI_DATATYPE_NULL, MPI_SUM, D);
    ERR(MPI_ERR_OP, ON_D, Ireduce_scatter, sb, rb, one, MPI_DATATYPE_NULL, MPI_SUM, D, &req);
    ERR(MPI_ERR_TYPE, ON_D, Send, sb, 1, MPI_DATATYPE_NULL, next, 0, D);
    ERR(MPI_ERR_TYPE, ON_D, Recv, rb, 1, MPI_DATATYPE_NULL, prev, 0, D, &st);
    ERR(MPI_ERR_TYPE, ON_D, Isend, sb, 1, MPI_DATATYPE_NULL, next, 0, D, &req);

    /* MPI_OP_NULL: MPI_ERR_OP; so is a predefined op on a derived type in Open MPI 4.1 */
    ERR(MPI_ERR_OP, ON_D, Allreduce, sb, rb, 1, MPI_INT, MPI_OP_NULL, D);
    ERR(MPI_ERR_OP, ON_D, Iallreduce, sb, rb, 1, MPI_INT, MPI_OP_NULL, D, &req);
    ERR(MPI_ERR_OP, ON_D, Reduce, sb, rb, 1, MPI_INT, MPI_OP_NULL, 0, D);
    ERR(MPI_ERR_OP, ON_D, Scan, sb, rb, 1, MPI_INT, MPI_OP_NULL, D);
    ERR(MPI_ERR_OP, ON_D, Exscan, sb, rb, 1, MPI_INT, MPI_OP_NULL, D);
    ERR(MPI_ERR_OP, ON_D, Reduce_scatter, sb, rb, one, MPI_INT, MPI_OP_NULL, D);
    ERR(MPI_ERR_OP, ON_D, Reduce_scatter_block, sb, rb, 1, MPI_INT, MPI_OP_NULL, D);
    ERR(MPI_ERR_OP, ON_D, Allreduce, sb, rb, 2, T_CT3, MPI_SUM, D);
    ERR(MPI_ERR_OP, ON_D, Allreduce, sb, rb, 1, MPI_DOUBLE, MPI_BAND, D);

    /* invalid ranks: MPI_ERR_RANK */
    ERR(MPI_ERR_RANK, ON_D, Send, sb, 1, MPI_INT, bad, 0, D);
    ERR(MPI_ERR_RANK, ON_D, Send, sb, 1, MPI_INT, badneg, 0, D);
    ERR(MPI_ERR_RANK, ON_D, Ssend, sb, 1, MPI_INT, bad, 0, D);
    ERR(MPI_ERR_RANK, ON_D, Bsend, sb, 1, MPI_INT, bad, 0, D);
    ERR(MPI_ERR_RANK, ON_D, Rsend, sb, 1, MPI_INT, bad, 0, D);
    ERR(MPI_ERR_RANK, ON_D, Isend, sb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Issend, sb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Ibsend, sb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Irsend, sb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Recv, rb, 1, MPI_INT, bad, 0, D, &st);
    ERR(MPI_ERR_RANK, ON_D, Irecv, rb, 1, MPI_INT, badneg, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Send_init, sb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Recv_init, rb, 1, MPI_INT, bad, 0, D, &req);
    ERR(MPI_ERR_RANK, ON_D, Sendrecv, sb, 1, MPI_INT, bad, 0, rb, 1, MPI_INT, prev, 0, D, &st);
    ERR(MPI_ERR_RANK, ON_D, Sendrecv, sb, 1, MPI_INT, next, 0, rb, 1, MPI_INT, bad, 0, D, &st);
    ERR(MPI_ERR_RANK, ON_D, Sendrecv_replace, rb, 1, MPI_INT, bad, 0, prev, 0, D, &st);
    ERR(MPI_ERR_RANK, ON_D, Probe, bad, 0, D, &st);
    ERR(MPI_ERR_RANK, ON_D, Iprobe, bad, 0, D, &flag, &st);
    ERR(MPI_ERR_RANK, ON_D, Mprobe, bad, 0, D, &msg, &st);
    ERR(MPI_ERR_RANK, ON_D, Improbe, badneg, 0, D, &flag, &msg, &st);

    /* invalid tags: MPI_ERR_TAG */
    ERR(MPI_ERR_TAG, ON_D, Send, sb, 1, MPI_INT, next, -1, D);
    ERR(MPI_ERR_TAG, ON_D, Isend, sb, 1, MPI_INT, next, -5, D, &req);
    ERR(MPI_ERR_TAG, ON_D, Recv, rb, 1, MPI_INT, prev, -3, D, &st);
    ERR(MPI_ERR_TAG, ON_D, Sendrecv, sb, 1, MPI_INT, next, -2, rb, 1, MPI_INT, prev, 0, D, &st);

    /* MPI_COMM_NULL: MPI_ERR_COMM, raised on MPI_COMM_WORLD */
    ERR(MPI_ERR_COMM, ON_W, Allreduce, sb, rb, 1, MPI_INT, MPI_SUM, MPI_COMM_NULL);
    ERR(MPI_ERR_COMM, ON_W, Iallreduce, sb, rb, 1, MPI_INT, MPI_SUM, MPI_COMM_NULL, &req);
    ERR(MPI_ERR_COMM, ON_W, Bcast, sb, 1, MPI_INT, 0, MPI_COMM_NULL);
    ERR(MPI_ERR_COMM, ON_W, Barrier, MPI_COMM_NULL);
    ERR(MPI_ERR_COMM, ON_W, Ibarrier, MPI_COMM_NULL, &req);
    ERR(MPI_ERR_COMM, ON_W, Alltoallw, sb, one, zero, tint, rb, one, zero, tint, MPI_COMM_NULL);
    ERR(MPI_ERR_COMM, ON_W, Send, sb, 1, MPI_INT, 0, 0, MPI_COMM_NULL);
    ERR(MPI_ERR_COMM, ON_W, Recv, rb, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &st);
    ERR(MPI_ERR_COMM, ON_W, Isend, sb, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &req);
    /* (MPI_Probe(MPI_COMM_NULL) raises on MPI_COMM_NULL in Open MPI 4.1: always fatal) */
    ERR(MPI_ERR_COMM, ON_W, Comm_dup, MPI_COMM_NULL, &nc);
    ERR(MPI_ERR_COMM, ON_W, Comm_dup_with_info, MPI_COMM_NULL, MPI_INFO_NULL, &nc);
    ERR(MPI_ERR_COMM, ON_W, Comm_split, MPI_COMM_NULL, 0, 0, &nc);
    ERR(MPI_ERR_COMM, ON_W, Comm_split_type, MPI_COMM_NULL, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &nc);
    MPI_Group g;
    MPI_Comm_group(D, &g);
    ERR(MPI_ERR_COMM, ON_W, Comm_create, MPI_COMM_NULL, g, &nc);
    MPI_Group_free(&g);
    CHECK(nc == MPI_COMM_NULL);
    ERR(MPI_ERR_GROUP, ON_D, Comm_create, D, MPI_GROUP_NULL, &nc);

    /* null requests and messages: no communicator, MPI_COMM_WORLD's handler */
    MPI_Request nreq = MPI_REQUEST_NULL, two[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    ERR(MPI_ERR_REQUEST, ON_W, Start, &nreq);
    ERR(MPI_ERR_REQUEST, ON_W, Startall, 2, two);
    ERR(MPI_ERR_REQUEST, ON_W, Request_free, &nreq);
    ERR(MPI_ERR_REQUEST, ON_W, Cancel, &nreq);
    /* (MPI_Mrecv/MPI_Imrecv of MPI_MESSAGE_NULL raise on MPI_COMM_NULL, whose handler is
     * MPI_ERRORS_ARE_FATAL in Open MPI 4.1: not testable in-process) */

    /* MPI_Mrecv/MPI_Imrecv with bad arguments on a real message: the message's communicator;
     * the message stays and a correct receive takes it */
    int mb[4] = {aval(R, 9, 0), aval(R, 9, 1), aval(R, 9, 2), aval(R, 9, 3)};
    MPI_Request ms;
    OK(Isend, mb, 4, MPI_INT, next, 77, D, &ms);
    OK(Mprobe, prev, 77, D, &msg, &st);
    ERR(MPI_ERR_TYPE, ON_D, Mrecv, rb, 4, MPI_DATATYPE_NULL, &msg, &st);
    ERR(MPI_ERR_COUNT, ON_D, Imrecv, rb, -1, MPI_INT, &msg, &req);
    CHECK(msg != MPI_MESSAGE_NULL, "a failed matched receive consumed the message");
    if (msg != MPI_MESSAGE_NULL) {
        int e[4] = {aval(prev, 9, 0), aval(prev, 9, 1), aval(prev, 9, 2), aval(prev, 9, 3)};
        OK(Mrecv, rb, 4, MPI_INT, &msg, &st);
        CHECK_I(rb, e, 4, "Mrecv after failed Mrecv/Imrecv");
    }
    OK(Wait, &ms, MPI_STATUS_IGNORE);

    /* (No MPI_Bsend without an attached buffer: Open MPI 4.1.4 lets a short one through, and
     * after a long one fails with MPI_ERR_BUFFER no later message to that peer is received.) */
    /* MPI_IN_PLACE as the receive buffer: Open MPI 4.1 raises this one on MPI_COMM_WORLD */
    ERR(MPI_ERR_ARG, ON_W, Alltoall, sb, 1, MPI_INT, MPI_IN_PLACE, 1, MPI_INT, D);
}

/* A message longer than the receive: MPI_ERR_TRUNCATE from each completion function (the
 * array forms: MPI_ERR_IN_STATUS, the class in the status), raised on the request's
 * communicator D. */
static void t_truncate(void)
{
    static const char *const FN[9] = {"Recv", "Wait", "Waitall", "Waitany", "Waitsome", "Test", "Testall", "Testany", "Testsome"};
    for (int how = 0; how < 9; how++) {
        int sb[8], rb[8];
        for (int i = 0; i < 8; i++) sb[i] = aval(R, how, i);
        MPI_Request s = MPI_REQUEST_NULL, r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        MPI_Status st, sts[2];
        tu_poison_status(&st);
        tu_poison_status(&sts[0]);
        tu_poison_status(&sts[1]);
        int tag = 50 + how, flag = 0, idx = -5, out = -5, ids[2], in_status = 0, rc;
        OK(Isend, sb, 8, MPI_INT, next, tag, D, &s);
        if (how == 0) {
            ERR(MPI_ERR_TRUNCATE, ON_D, Recv, rb, 3, MPI_INT, prev, tag, D, &st);
        } else {
            OK(Irecv, rb, 3, MPI_INT, prev, tag, D, &r[1]); /* r[0] stays null */
            OK(Barrier, D); /* every message is on its way */
            switch (how) {
            case 1: ERR(MPI_ERR_TRUNCATE, ON_D, Wait, &r[1], &st); break;
            case 2: ERRH(MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE, ON_D, Waitall, 2, r, sts); in_status = 1; break;
            case 3:
                ERR(MPI_ERR_TRUNCATE, ON_D, Waitany, 2, r, &idx, &st);
                CHECK(idx == 1, "Waitany index %d", idx);
                break;
            case 4:
                ERRH(MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE, ON_D, Waitsome, 2, r, &out, ids, sts);
                CHECK(out == 1 && ids[0] == 1, "Waitsome outcount %d index %d", out, ids[0]);
                sts[1] = sts[0], in_status = 1;
                break;
            case 5:
                eh_reset(); /* the polls before completion raise nothing */
                while ((rc = CALL(Test, &r[1], &flag, &st)) == MPI_SUCCESS && !flag) {}
                expect(__FILE__, __LINE__, "MPI_Test", MPI_ERR_TRUNCATE, ON_D, rc);
                CHECK(flag == 1, "Test returned an error without flag");
                break;
            case 6:
                eh_reset();
                while ((rc = CALL(Testall, 2, r, &flag, sts)) == MPI_SUCCESS && !flag) {}
                expect_h(__FILE__, __LINE__, "MPI_Testall", MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE, ON_D, rc);
                in_status = 1;
                break;
            case 7:
                eh_reset();
                while ((rc = CALL(Testany, 2, r, &idx, &flag, &st)) == MPI_SUCCESS && !flag) {}
                expect(__FILE__, __LINE__, "MPI_Testany", MPI_ERR_TRUNCATE, ON_D, rc);
                CHECK(idx == 1, "Testany index %d", idx);
                break;
            default:
                eh_reset();
                while ((rc = CALL(Testsome, 2, r, &out, ids, sts)) == MPI_SUCCESS && out == 0) {}
                expect_h(__FILE__, __LINE__, "MPI_Testsome", MPI_ERR_IN_STATUS, MPI_ERR_TRUNCATE, ON_D, rc);
                CHECK(out == 1 && ids[0] == 1, "Testsome outcount %d index %d", out, ids[0]);
                sts[1] = sts[0], in_status = 1;
                break;
            }
        }
        if (in_status) {
            int c = -1;
            MPI_Error_class(sts[1].MPI_ERROR, &c);
            CHECK(c == MPI_ERR_TRUNCATE, "MPI_%s: status MPI_ERROR class %d %s", FN[how], c, class_name(c));
            CHECK(sts[1].MPI_SOURCE == prev && sts[1].MPI_TAG == tag, "MPI_%s: status source %d tag %d", FN[how],
                  sts[1].MPI_SOURCE, sts[1].MPI_TAG);
        } else {
            CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == tag, "MPI_%s: status source %d tag %d", FN[how],
                  st.MPI_SOURCE, st.MPI_TAG);
        }
        OK(Wait, &s, MPI_STATUS_IGNORE);
        OK(Barrier, D);
    }
}

/* after all that, both communicators still work */
static void t_still_works(void)
{
    MPI_Comm cs[2] = {D, MPI_COMM_WORLD};
    for (int c = 0; c < 2; c++) {
        int v[3] = {ival(R, 0), ival(R, 1), ival(R, 2)}, r[3] = {-1, -1, -1}, e[3] = {0, 0, 0};
        for (int q = 0; q < P; q++)
            for (int i = 0; i < 3; i++) e[i] += ival(q, i);
        OK(Allreduce, v, r, 3, MPI_INT, MPI_SUM, cs[c]);
        CHECK_I(r, e, 3, "Allreduce after the errors");
    }
}

static int fatal_mode(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--fatal")) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (fatal_mode(argc, argv)) {
        /* rank 0 alone makes the invalid call (the argument check fails before any
         * communication); the others wait in a barrier the abort ends. One failing rank, so
         * mpirun's report of it is never garbled by a second one arriving at once. */
        MPI_Init(&argc, &argv);
        int a = 1, b = 0, r = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        if (r == 0) {
            MPI_Allreduce(&a, &b, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            printf("SURVIVED an invalid MPI_Allreduce under MPI_ERRORS_ARE_FATAL\n");
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    tu_init(&argc, &argv, -1);
    tu_ring(&R, &P, &next, &prev);
    tu_types_create();
    OK(Comm_dup, MPI_COMM_WORLD, &D);
    MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(D, &eh);
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_Comm_dup did not copy the error handler");
    MPI_Errhandler_free(&eh);

    /* pass 1: MPI_ERRORS_RETURN */
    MPI_Comm_set_errhandler(D, MPI_ERRORS_RETURN);
    t_args();
    t_truncate();
    /* pass 2: counting handlers */
    MPI_Errhandler hw, hd;
    MPI_Comm_create_errhandler(eh_world, &hw);
    MPI_Comm_create_errhandler(eh_dup, &hd);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, hw);
    MPI_Comm_set_errhandler(D, hd);
    handlers_on = 1;
    t_args();
    t_truncate();
    handlers_on = 0;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&hw);
    MPI_Errhandler_free(&hd);
    t_still_works();
    MPI_Comm_free(&D);
    tu_types_free();
    return tu_finalize();
}
