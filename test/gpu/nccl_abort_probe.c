/* nccl_abort_probe: raw NCCL alone (no ncclmpi), 2 ranks. It asks what NCCL does to the peer when one
 * rank of a communicator stops taking part because of a local failure: does the peer's NCCL call
 * end with an error, or wait forever? Rank 1 is the failing rank; rank 0 reports what it saw.
 *   mpirun -np 2 nccl_abort_probe MODE [SECONDS]
 *   (exit 0: the mode ran to the end, whatever NCCL did (the output is the answer); 1: a setup
 *   step failed; 2: bad arguments; 3: a call or barrier did not return in time: a hang)
 * Meant for ranks that share one GPU as hosts of their own (an NCCL_HOSTID per rank); every rank
 * uses device 0. SECONDS (default 20): how long rank 0 waits for a call before it reports a hang.
 * Every NCCL call of rank 0 runs on a helper thread that the main thread waits for, so a call that
 * blocks on the host is reported ("HANG: ... did not return in N s", then _exit(3)); MPI barriers
 * are Ibarrier/Test loops with a deadline (2*SECONDS+10 s), so no rank waits forever. In the
 * *-abort modes rank 1 has finished its ncclCommAbort (a barrier) before rank 0 makes its call.
 * MODE:
 *   coll-abort     both init; rank 1 ncclCommAbort; rank 0 the first ncclAllReduce (4 floats)
 *   coll-idle      the same, but rank 1 stays alive without calling NCCL (the baseline)
 *   p2p-abort      as coll-abort, with ncclSend + ncclRecv in one group on rank 0
 *   init-early     rank 1 never calls ncclCommInitRank; rank 0 does
 *   init-nb-abort  both ncclCommInitRankConfig with blocking=0; rank 1 aborts at once; rank 0 polls
 *   nb-cost        host ns per ncclAllReduce (2 floats): nonblocking comm + async-error polling
 *                  against a blocking comm
 *   coll-late      as coll-abort, but rank 1 aborts 2 s after rank 0 entered its ncclAllReduce */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NCOST = 2000, NWARM = 200, NREP = 5 };
static int rank = -1, secs = 20;
static const char *mode = "";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("nccl_abort_probe: rank %d: %s: ", rank, mode);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

// a hang found: say so and leave at once (no MPI_Finalize: the peer may never come)
static void hang(const char *what, double limit)
{
    say("HANG: %s did not return in %g s", what, limit);  // (say flushes stdout)
    fflush(stderr);
    _exit(3);
}

static void fail(void)
{
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// a setup step that failed: say which, and end the run (exit 1)
#define CUCK(x) do { cudaError_t e_ = (x); if (e_) { say("%s: %s", #x, cudaGetErrorString(e_)); fail(); } } while (0)
#define NCK(x) do { ncclResult_t r_ = (x); if (r_) { say("%s: %s", #x, ncclGetErrorString(r_)); fail(); } } while (0)
#define MCK(x) do { if ((x) != MPI_SUCCESS) { say("%s failed", #x); fail(); } } while (0)

struct ctx {
    ncclComm_t comm, comm2;  // comm2: nb-cost's blocking communicator
    ncclUniqueId id, id2;
    ncclConfig_t cfg;
    cudaStream_t s;
    float *buf;
    ncclResult_t sub[3];  // p2p-abort: ncclGroupStart, ncclSend, ncclRecv
};

// --- one NCCL call on a helper thread, waited for up to a deadline ---
typedef ncclResult_t (*job_fn)(struct ctx *);
struct job {
    job_fn fn;
    struct ctx *c;
    ncclResult_t rc;
    double t1;
    atomic_int done;
};

static void *job_main(void *p)
{
    struct job *j = p;
    cudaSetDevice(0);
    j->rc = j->fn(j->c);
    j->t1 = now();
    atomic_store(&j->done, 1);
    return NULL;
}

static ncclResult_t do_init(struct ctx *c) { return ncclCommInitRank(&c->comm, 2, c->id, rank); }
static ncclResult_t do_init_nb(struct ctx *c) { return ncclCommInitRankConfig(&c->comm, 2, c->id, rank, &c->cfg); }
static ncclResult_t do_init2(struct ctx *c) { return ncclCommInitRank(&c->comm2, 2, c->id2, rank); }
static ncclResult_t do_abort(struct ctx *c) { return ncclCommAbort(c->comm); }
static ncclResult_t do_abort2(struct ctx *c) { return ncclCommAbort(c->comm2); }
static ncclResult_t do_allreduce(struct ctx *c)
{
    return ncclAllReduce(c->buf, c->buf, 4, ncclFloat, ncclSum, c->comm, c->s);
}
static ncclResult_t do_sendrecv(struct ctx *c)
{
    c->sub[0] = ncclGroupStart();
    c->sub[1] = ncclSend(c->buf, 1, ncclFloat, 1, c->comm, c->s);
    c->sub[2] = ncclRecv(c->buf + 1, 1, ncclFloat, 1, c->comm, c->s);
    return ncclGroupEnd();
}

// FN(C), the call WHAT, on a helper thread, reported with its result and time; still running
// after LIMIT s: a hang
static ncclResult_t timed(const char *what, job_fn fn, struct ctx *c, double limit)
{
    struct job j = {.fn = fn, .c = c, .rc = ncclSuccess, .t1 = 0};
    atomic_init(&j.done, 0);
    pthread_t th;
    const double t0 = now();
    const int e = pthread_create(&th, NULL, job_main, &j);
    if (e) say("pthread_create: %s", strerror(e)), fail();
    while (!atomic_load(&j.done)) {
        if (now() - t0 > limit) hang(what, limit);
        nap_ms();
    }
    pthread_join(th, NULL);
    say("%s returned %s after %.3f s", what, ncclGetErrorString(j.rc), j.t1 - t0);
    return j.rc;
}

// MPI_Barrier as Ibarrier + Test with a deadline
static void barrier(const char *what, double limit)
{
    MPI_Request req;
    int done = 0;
    const double t0 = now();
    MCK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    for (;;) {
        MCK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (now() - t0 > limit) hang(what, limit);
        nap_ms();
    }
}

// the async error of a nonblocking comm, polled every 1 ms (SPIN: without the pause) while it is
// ncclInProgress, up to LIMIT s from T0
static ncclResult_t settle(ncclComm_t comm, double t0, double limit, int spin)
{
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress) {
        const ncclResult_t g = ncclCommGetAsyncError(comm, &st);
        if (g != ncclSuccess) return g;
        if (st != ncclInProgress || (limit > 0 && now() - t0 > limit)) break;
        if (!spin) nap_ms();
    }
    return st;
}

// after rank 0's call returned: the stream and the comm's async error, every 1 ms, until one of
// them ends or LIMIT s from T0 (the call's start) have passed
static void watch(struct ctx *c, double t0, double limit)
{
    for (;;) {
        const cudaError_t q = cudaStreamQuery(c->s);
        ncclResult_t a = ncclSuccess;
        const ncclResult_t g = ncclCommGetAsyncError(c->comm, &a);
        const double t = now() - t0;
        const char *as = ncclGetErrorString(a);
        if (g != ncclSuccess) {
            say("ncclCommGetAsyncError failed: %s at %.3f s", ncclGetErrorString(g), t);
        } else if (q == cudaSuccess) {
            say("stream done at %.3f s (async error: %s)", t, as);
        } else if (q != cudaErrorNotReady) {
            say("cudaStreamQuery: %s at %.3f s (async error: %s)", cudaGetErrorString(q), t, as);
        } else if (a != ncclSuccess && a != ncclInProgress) {
            say("async error %s at %.3f s, stream still busy", as, t);
        } else if (t > limit) {
            say("stream still busy and no async error (%s) at %.3f s: the device op waits for the peer", as, t);
        } else {
            nap_ms();
            continue;
        }
        return;
    }
}

static double median(double *v)
{
    double s[NREP];
    memcpy(s, v, sizeof(s));
    for (int i = 1; i < NREP; i++)
        for (int k = i; k > 0 && s[k] < s[k - 1]; k--) {
            const double x = s[k];
            s[k] = s[k - 1];
            s[k - 1] = x;
        }
    return s[NREP / 2];
}

// nb-cost: N allreduces through the nonblocking comm (each followed by polling its async error)
// or the blocking one; the host ns per call, the stream synchronized outside the timing
static ncclResult_t cost_block(struct ctx *c, int nb, int n, long *inprog, double *ns)
{
    ncclResult_t r = ncclSuccess;
    const double t0 = now();
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        r = ncclAllReduce(c->buf, c->buf, 2, ncclFloat, ncclSum, nb ? c->comm : c->comm2, c->s);
        if (nb && r == ncclInProgress) ++*inprog;
        if (nb && (r == ncclSuccess || r == ncclInProgress)) r = settle(c->comm, 0, 0, 1);
    }
    if (ns) *ns = (now() - t0) / n * 1e9;
    if (r != ncclSuccess) {
        say("%s ncclAllReduce: %s", nb ? "nonblocking" : "blocking", ncclGetErrorString(r));
        return r;
    }
    const cudaError_t e = cudaStreamSynchronize(c->s);
    if (e != cudaSuccess) say("cudaStreamSynchronize: %s", cudaGetErrorString(e));
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

static ncclResult_t do_cost(struct ctx *c)
{
    double a[NREP], b[NREP];
    long inprog = 0, warm = 0;
    ncclResult_t r = cost_block(c, 1, NWARM, &warm, NULL);
    if (r == ncclSuccess) r = cost_block(c, 0, NWARM, &warm, NULL);
    for (int k = 0; k < NREP && r == ncclSuccess; k++) {
        r = cost_block(c, 1, NCOST, &inprog, &a[k]);
        if (r == ncclSuccess) r = cost_block(c, 0, NCOST, &inprog, &b[k]);
        if (r == ncclSuccess) say("block %d: nonblocking+poll %.0f ns/call, blocking %.0f ns/call", k, a[k], b[k]);
    }
    if (r != ncclSuccess) return r;
    say("median of %d blocks of %d: nonblocking+poll %.0f ns/call, blocking %.0f ns/call (difference %.0f ns)",
        NREP, NCOST, median(a), median(b), median(a) - median(b));
    say("nonblocking ncclAllReduce returned ncclInProgress %ld of %d times (warm-up: %ld of %d)", inprog,
        NREP * NCOST, warm, NWARM);
    return ncclSuccess;
}

int main(int argc, char **argv)
{
    int provided, size;
    MCK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));  // helper threads call no MPI
    MCK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MCK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    static const char *const modes[] = {"coll-abort", "coll-idle", "p2p-abort", "init-early", "init-nb-abort",
                                        "nb-cost", "coll-late"};
    int m = 0;
    while (argc > 1 && m < 7 && strcmp(argv[1], modes[m])) m++;
    if (argc > 2) secs = atoi(argv[2]);
    if (argc < 2 || argc > 3 || m == 7 || secs < 1 || size != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 nccl_abort_probe coll-abort|coll-idle|p2p-abort|init-early|"
                            "init-nb-abort|nb-cost|coll-late [SECONDS]\n");
        MPI_Finalize();
        return 2;
    }
    mode = modes[m];
    const double lim = secs, blim = 2.0 * secs + 10;  // a call's deadline; a barrier's
    int ver = 0;
    NCK(ncclGetVersion(&ver));
    const char *hid = getenv("NCCL_HOSTID");
    say("NCCL %d, %d s to wait, NCCL_HOSTID=%s", ver, secs, hid ? hid : "(unset)");
    CUCK(cudaSetDevice(0));
    struct ctx c;
    memset(&c, 0, sizeof(c));
    CUCK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
    CUCK(cudaMalloc((void **)&c.buf, 4 * sizeof(float)));
    CUCK(cudaMemset(c.buf, 0, 4 * sizeof(float)));
    if (rank == 0) NCK(ncclGetUniqueId(&c.id));
    MCK(MPI_Bcast(&c.id, sizeof(c.id), MPI_BYTE, 0, MPI_COMM_WORLD));
    int live = 0;  // c.comm still to be aborted at the end
    ncclResult_t r;

    if (m <= 2 || m == 6) {  // coll-abort, coll-idle, p2p-abort, coll-late
        NCK(timed("ncclCommInitRank", do_init, &c, lim));
        live = 1;
        barrier("MPI_Barrier after init", blim);
        if (rank == 1 && m == 6) {  // rank 0 is inside its call (connecting at first use) by then
            sleep(2);
            timed("ncclCommAbort", do_abort, &c, lim);
            live = 0;
        } else if (rank == 1 && m != 1) {
            timed("ncclCommAbort", do_abort, &c, lim);
            live = 0;
        } else if (rank == 1) {
            say("staying alive without calling NCCL");
        }
        if (m != 1 && m != 6) barrier("MPI_Barrier after rank 1's abort", blim);  // rank 1 is gone before rank 0 calls
        if (rank == 0) {
            const double t0 = now();
            if (m == 2) {
                timed("ncclGroupEnd (ncclSend + ncclRecv to/from rank 1)", do_sendrecv, &c, lim);
                say("ncclGroupStart %s, ncclSend %s, ncclRecv %s", ncclGetErrorString(c.sub[0]),
                    ncclGetErrorString(c.sub[1]), ncclGetErrorString(c.sub[2]));
            } else {
                timed("ncclAllReduce", do_allreduce, &c, lim);
            }
            watch(&c, t0, lim);
            timed("ncclCommAbort", do_abort, &c, lim);
            live = 0;
        }
    } else if (m == 3) {  // init-early
        if (rank == 1) {
            say("not calling ncclCommInitRank (failed before NCCL's bootstrap)");
        } else {
            r = timed("ncclCommInitRank", do_init, &c, lim);
            live = r == ncclSuccess;
        }
    } else if (m == 4) {  // init-nb-abort
        c.cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
        c.cfg.blocking = 0;
        const double t0 = now();
        r = timed("ncclCommInitRankConfig (blocking=0)", do_init_nb, &c, lim);
        if (r == ncclSuccess || r == ncclInProgress) {
            if (rank == 1) {
                timed("ncclCommAbort", do_abort, &c, lim);
            } else {
                const ncclResult_t st = settle(c.comm, now(), lim, 0);
                say("async state %s at %.3f s after the init call", ncclGetErrorString(st), now() - t0);
                timed("ncclCommAbort", do_abort, &c, lim);
            }
        }
    } else {  // nb-cost
        if (rank == 0) NCK(ncclGetUniqueId(&c.id2));
        MCK(MPI_Bcast(&c.id2, sizeof(c.id2), MPI_BYTE, 0, MPI_COMM_WORLD));
        c.cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
        c.cfg.blocking = 0;
        const double t0 = now();
        r = timed("ncclCommInitRankConfig (blocking=0)", do_init_nb, &c, lim);
        if (r == ncclSuccess || r == ncclInProgress) {
            live = 1;
            r = settle(c.comm, t0, lim, 0);
            say("nonblocking comm: %s at %.3f s", ncclGetErrorString(r), now() - t0);
        }
        if (r == ncclSuccess) r = timed("ncclCommInitRank (blocking comm)", do_init2, &c, lim);
        if (r == ncclSuccess) {
            timed("the cost runs", do_cost, &c, 3 * lim);
            timed("ncclCommAbort (blocking comm)", do_abort2, &c, lim);
        }
    }

    barrier("MPI_Barrier at the end", blim);
    if (live) timed("ncclCommAbort (after the end barrier)", do_abort, &c, lim);
    cudaError_t e = cudaFree(c.buf);
    if (e == cudaSuccess) e = cudaStreamDestroy(c.s);
    if (e != cudaSuccess) say("cudaFree/cudaStreamDestroy at the end: %s", cudaGetErrorString(e));
    say("done");
    MPI_Finalize();
    return 0;
}
