/* revoke_prog: calls on a revoked communicator (ULFM: MPIX_Comm_revoke) give the real MPI's
 * answer, for test/unit/revoke.sh (mpi4py's test_ulfm.py testRevoke: MPI_Recv from MPI_PROC_NULL
 * on a revoked communicator must fail with MPI_ERR_REVOKED). On the stand-in CUDA driver
 * (attached: ncclmpi takes its device-capable path), on a dup of MPI_COMM_WORLD with an error
 * handler of the program's own (it counts its calls and returns, as MPI_ERRORS_RETURN does):
 * MPI_Barrier, then MPI_Send, MPI_Recv (with a status and with MPI_STATUS_IGNORE), MPI_Isend and
 * MPI_Irecv (+ MPI_Wait), MPI_Sendrecv and MPI_Sendrecv_replace with MPI_PROC_NULL. First on the
 * dup as it is: each succeeds, a receive's status MPI_PROC_NULL's (MPI_ANY_TAG, 0 bytes). Then,
 * the dup revoked, each call first as PMPI_ (the real MPI, unseen by ncclmpi), then as MPI_: the
 * same error class, through the handler as many times; MPI_Barrier, MPI_Send and MPI_Recv must
 * give MPI_ERR_REVOKED (Open MPI 5.0.11 completes the nonblocking calls and MPI_Sendrecv(_replace)
 * with MPI_PROC_NULL on a revoked communicator). Each with no buffer (NULL, 0: as mpi4py passes
 * [None, 0, MPI.BYTE]), a small host buffer (below an envelope's size: no decoding), a host
 * buffer that may get an envelope and a buffer of the stand-in's device memory.
 * REVOKE_THREAD_MULTIPLE set: at MPI_THREAD_MULTIPLE (as mpi4py initialises), where a receive
 * may take ncclmpi's receive gate (envelope.h). "revoke_prog: ok" when all is right; exit 77 when
 * the real MPI's MPI_Barrier on the revoked dup does not report MPI_ERR_REVOKED (revocation not
 * on); then a blocking MPI_Recv from the rank itself on the revoked communicator must fail with
 * MPI_ERR_REVOKED at once (it waited for ever at MPI_THREAD_MULTIPLE with envelopes on); built
 * where the MPI has a revocation (configure: NM_REVOKE_FN). */
#include <cuda.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#include <stdio.h>

#include "stand_in.h"

/* NM_REVOKE_FN: the MPI's revocation (configure: MPIX_Comm_revoke or MPI_Comm_revoke); the test is
 * built only where it has one */
#ifndef NM_REVOKE_FN
#define NM_REVOKE_FN MPIX_Comm_revoke
#endif
#ifndef MPI_ERR_REVOKED
#define MPI_ERR_REVOKED MPIX_ERR_REVOKED
#endif

enum { N = 128 };  /* ints: a host receive of as many gets an envelope's decoding (at least NM_ENV_WIRE bytes) */

static int handled, handled_code;  /* the error handler's calls, and its last code */

static void count_errors(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handled++;
    handled_code = *code;
}

static int bad, revoke_ignored;

enum { BARRIER, SEND, RECV, RECV_IGNORE, ISEND, IRECV, SENDRECV, SENDRECV_REPLACE, NCALLS };
static const char *const names[NCALLS] = {
    "MPI_Barrier",          "MPI_Send",
    "MPI_Recv",             "MPI_Recv (MPI_STATUS_IGNORE)",
    "MPI_Isend + MPI_Wait", "MPI_Irecv + MPI_Wait",
    "MPI_Sendrecv",         "MPI_Sendrecv_replace"};
/* the calls that must report MPI_ERR_REVOKED on a revoked communicator (as mpi4py's test_ulfm.py
 * asserts); the real MPI's answer to the others is the expected one (Open MPI 5.0.11 completes a
 * nonblocking call and MPI_Sendrecv(_replace) with MPI_PROC_NULL on a revoked communicator) */
static const int must_revoke[NCALLS] = {1, 1, 1, 1, 0, 0, 0, 0};

/* call c with MPI_PROC_NULL on comm, buffer p of count elements of type t: the MPI_ function, or
 * the real MPI's PMPI_ one (pmpi), which ncclmpi does not see; the code, and the status of a
 * receive in *st. A nonblocking call: the error either from the call or from its MPI_Wait. */
static int call(int c, int pmpi, MPI_Comm comm, void *p, int count, MPI_Datatype t, MPI_Status *st)
{
    MPI_Request r = MPI_REQUEST_NULL;
    int rc;
    switch (c) {
    case BARRIER: return pmpi ? PMPI_Barrier(comm) : MPI_Barrier(comm);
    case SEND:
        return pmpi ? PMPI_Send(p, count, t, MPI_PROC_NULL, 0, comm) : MPI_Send(p, count, t, MPI_PROC_NULL, 0, comm);
    case RECV:
        return pmpi ? PMPI_Recv(p, count, t, MPI_PROC_NULL, 0, comm, st)
                    : MPI_Recv(p, count, t, MPI_PROC_NULL, 0, comm, st);
    case RECV_IGNORE:
        return pmpi ? PMPI_Recv(p, count, t, MPI_PROC_NULL, 0, comm, MPI_STATUS_IGNORE)
                    : MPI_Recv(p, count, t, MPI_PROC_NULL, 0, comm, MPI_STATUS_IGNORE);
    case ISEND:
        rc = pmpi ? PMPI_Isend(p, count, t, MPI_PROC_NULL, 0, comm, &r)
                  : MPI_Isend(p, count, t, MPI_PROC_NULL, 0, comm, &r);
        if (rc == MPI_SUCCESS) rc = pmpi ? PMPI_Wait(&r, MPI_STATUS_IGNORE) : MPI_Wait(&r, MPI_STATUS_IGNORE);
        return rc;
    case IRECV:
        rc = pmpi ? PMPI_Irecv(p, count, t, MPI_PROC_NULL, 0, comm, &r)
                  : MPI_Irecv(p, count, t, MPI_PROC_NULL, 0, comm, &r);
        if (rc == MPI_SUCCESS) rc = pmpi ? PMPI_Wait(&r, st) : MPI_Wait(&r, st);
        return rc;
    case SENDRECV:
        return pmpi ? PMPI_Sendrecv(p, count, t, MPI_PROC_NULL, 0, p, count, t, MPI_PROC_NULL, 0, comm, st)
                    : MPI_Sendrecv(p, count, t, MPI_PROC_NULL, 0, p, count, t, MPI_PROC_NULL, 0, comm, st);
    default:
        return pmpi ? PMPI_Sendrecv_replace(p, count, t, MPI_PROC_NULL, 0, MPI_PROC_NULL, 0, comm, st)
                    : MPI_Sendrecv_replace(p, count, t, MPI_PROC_NULL, 0, MPI_PROC_NULL, 0, comm, st);
    }
}

static int class_of(int rc)
{
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    return cls;
}

/* each call with MPI_PROC_NULL on comm, with buffer p of count elements of type t (buf: its kind) */
static void calls(MPI_Comm comm, int rank, int revoked, const char *buf, void *p, int count, MPI_Datatype t)
{
    for (int c = 0; c < NCALLS; c++) {
        MPI_Status st;
        int want = MPI_SUCCESS, want_calls = 0;
        if (revoked) {  /* what the real MPI answers, through the handler how many times */
            const int h = handled;
            want = class_of(call(c, 1, comm, p, count, t, &st));
            want_calls = handled - h;
            if (must_revoke[c] && want != MPI_ERR_REVOKED) {
                printf("revoke_prog: rank %d: the real MPI's %s (%s buffer) on the revoked communicator gave class "
                       "%d, not MPI_ERR_REVOKED (%d): revocation is not on in this run\n",
                       rank, names[c], buf, want, MPI_ERR_REVOKED);
                revoke_ignored = 1;
                return;
            }
        }
        const int h = handled;
        st.MPI_SOURCE = st.MPI_TAG = -12345;
        const int rc = call(c, 0, comm, p, count, t, &st);
        const int cls = class_of(rc), got_calls = handled - h;
        if (cls != want || got_calls != want_calls) {
            printf("revoke_prog: rank %d: %s (%s buffer), %s: class %d, %d handler call(s); expected class %d "
                   "(the real MPI's), %d handler call(s)\n",
                   rank, names[c], buf, revoked ? "revoked" : "not revoked", cls, got_calls, want, want_calls);
            bad = 1;
        }
        int n = -1;
        const int has_status = c == RECV || c == IRECV || c == SENDRECV || c == SENDRECV_REPLACE;
        if (!revoked && has_status && MPI_Get_count(&st, MPI_BYTE, &n) == MPI_SUCCESS &&
            (st.MPI_SOURCE != MPI_PROC_NULL || st.MPI_TAG != MPI_ANY_TAG || n != 0)) {
            printf("revoke_prog: rank %d: %s (%s buffer): status source %d tag %d count %d; expected MPI_PROC_NULL's\n",
                   rank, names[c], buf, st.MPI_SOURCE, st.MPI_TAG, n);
            bad = 1;
        }
    }
}

int main(int argc, char **argv)
{
    CUdeviceptr dev[1];
    if (!stand_in_driver("revoke_prog", 1, N * sizeof(int), dev)) return 2;
    int rank, size;
    stand_in_mpi_init(&argc, &argv, "REVOKE_THREAD_MULTIPLE", &rank, &size);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(count_errors, &eh);
    int host[N] = {0};
    struct {
        const char *name;
        void *p;
        int count;
    } bufs[] = {{"no", NULL, 0}, {"small host", host, 4}, {"host", host, N}, {"device", (void *)(uintptr_t)dev[0], N}};
    for (int b = 0; b < 4 && !revoke_ignored; b++) {
        MPI_Comm comm;
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        MPI_Comm_set_errhandler(comm, eh);
        const MPI_Datatype t = bufs[b].count ? MPI_INT : MPI_BYTE;
        calls(comm, rank, 0, bufs[b].name, bufs[b].p, bufs[b].count, t);
        const int rc = NM_REVOKE_FN(comm);
        if (rc != MPI_SUCCESS) {
            printf("revoke_prog: rank %d: revoking the communicator failed (%d)\n", rank, rc);
            bad = 1;
        } else {
            calls(comm, rank, 1, bufs[b].name, bufs[b].p, bufs[b].count, t);
            /* a blocking receive from a rank (itself) fails at once as the real MPI's does
             * (ncclmpi posts gated receives as MPI_Irecv + MPI_Wait, which Open MPI 5.0.11 never
             * completes on a revoked communicator: it asks first) */
            int cls = -1, rc2 = MPI_Recv(bufs[b].p, bufs[b].count, t, rank, 7, comm, MPI_STATUS_IGNORE);
            MPI_Error_class(rc2, &cls);
            if (cls != MPI_ERR_REVOKED) {
                printf("revoke_prog: rank %d: MPI_Recv from itself (%s buffer), revoked: class %d; expected MPI_ERR_REVOKED\n",
                       rank, bufs[b].name, cls);
                bad = 1;
            }
        }
        MPI_Comm_free(&comm);
    }
    MPI_Errhandler_free(&eh);
    int mine[2] = {bad, revoke_ignored}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !all[0] && !all[1]) printf("revoke_prog: ok\n");
    MPI_Finalize();
    return all[0] ? 1 : all[1] ? 77 : 0;
}
