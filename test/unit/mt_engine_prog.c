/* mt_engine_prog: the execution engine under MPI_THREAD_MULTIPLE, on the stand-in CUDA driver and
 * NCCL (one rank; test/unit/mt_engine.sh). THREADS threads, each on its own duplicate of
 * MPI_COMM_WORLD, run device-buffer collectives at once for ITERS iterations: a burst of
 * nonblocking MPI_Iallreduce + MPI_Waitall (automatic coalescing), a blocking MPI_Allreduce in
 * place, an explicit ncclmpi_group_begin/end of MPI_Iallreduce (sharing one NCCL call: NCCLMPI_FUSE,
 * several threads fusing at once), an MPI_Bcast, a host-buffer
 * MPI_Allreduce, and now and then a communicator duplicated, used on device buffers (its NCCL
 * communicator made then) and freed. Outputs are poisoned before each call and checked after it
 * (one rank: a sum is the input). The engine's pools, queues and locks are shared by the threads;
 * a wrong result, an error, a crash or a hang (the script's timeout) fails the test. Prints
 * "mt_engine_prog: ok" and the NCCL-route count when every check passed. */
#include <dlfcn.h>
#include <mpi.h>
#include <ncclmpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stand_in.h"

enum { THREADS = 4, ITERS = 200, BURST = 8, GROUP = 8, N = 256, BUFS_PER_THREAD = 2 * BURST + 1 };

static MPI_Comm comms[THREADS];
static CUdeviceptr bufs[THREADS * BUFS_PER_THREAD];
static int (*group_begin)(void), (*group_end)(void);
static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&fail_mu);
    if (failures++ < 10) {
        fputs("mt_engine_prog: FAIL: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    pthread_mutex_unlock(&fail_mu);
    va_end(ap);
}

static int *dev(int t, int k) { return (int *)(uintptr_t)bufs[t * BUFS_PER_THREAD + k]; }  /* (host-visible) */
static int value(int t, int it, int k, int i) { return t * 1000003 + it * 1009 + k * 31 + i; }

static void fill(int *p, int t, int it, int k)
{
    for (int i = 0; i < N; i++) p[i] = value(t, it, k, i);
}
static void poison(int *p)
{
    for (int i = 0; i < N; i++) p[i] = -77;
}
static int nranks = 1;  /* a sum over the ranks of equal inputs: nranks times the input */
static void check_times(const int *p, int t, int it, int k, const char *what, int times)
{
    for (int i = 0; i < N; i++)
        if (p[i] != times * value(t, it, k, i)) {
            fail("thread %d iteration %d %s (buffer %d): element %d is %d, expected %d", t, it, what, k, i, p[i],
                 times * value(t, it, k, i));
            return;
        }
}
static void check(const int *p, int t, int it, int k, const char *what) { check_times(p, t, it, k, what, nranks); }
static void ok(int rc, int t, int it, const char *what)
{
    if (rc != MPI_SUCCESS) fail("thread %d iteration %d: %s returned %d", t, it, what, rc);
}

static void *run(void *arg)
{
    const int t = (int)(long)arg;
    const MPI_Comm c = comms[t];
    MPI_Request q[BURST];
    int host[N];
    for (int it = 0; it < ITERS; it++) {
        /* a burst of nonblocking collectives, completed together */
        for (int k = 0; k < BURST; k++) {
            fill(dev(t, k), t, it, k);
            poison(dev(t, BURST + k));
            ok(MPI_Iallreduce(dev(t, k), dev(t, BURST + k), N, MPI_INT, MPI_SUM, c, &q[k]), t, it, "MPI_Iallreduce");
        }
        ok(MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE), t, it, "MPI_Waitall");
        for (int k = 0; k < BURST; k++) check(dev(t, BURST + k), t, it, k, "burst");
        /* blocking, in place */
        fill(dev(t, 2 * BURST), t, it, 99);
        ok(MPI_Allreduce(MPI_IN_PLACE, dev(t, 2 * BURST), N, MPI_INT, MPI_SUM, c), t, it, "MPI_Allreduce");
        check(dev(t, 2 * BURST), t, it, 99, "in-place allreduce");
        /* an explicit group */
        ok(group_begin(), t, it, "ncclmpi_group_begin");
        for (int k = 0; k < GROUP; k++) {
            fill(dev(t, k), t, it, 50 + k);
            poison(dev(t, BURST + k));
            ok(MPI_Iallreduce(dev(t, k), dev(t, BURST + k), N, MPI_INT, MPI_SUM, c, &q[k]), t, it, "MPI_Iallreduce in a group");
        }
        ok(group_end(), t, it, "ncclmpi_group_end");
        ok(MPI_Waitall(GROUP, q, MPI_STATUSES_IGNORE), t, it, "MPI_Waitall after a group");
        for (int k = 0; k < GROUP; k++) check(dev(t, BURST + k), t, it, 50 + k, "group");
        /* a broadcast, and a host-buffer call on the same communicator */
        fill(dev(t, 0), t, it, 7);
        ok(MPI_Bcast(dev(t, 0), N, MPI_INT, 0, c), t, it, "MPI_Bcast");
        check_times(dev(t, 0), t, it, 7, "bcast", 1);
        fill(host, t, it, 8);
        ok(MPI_Allreduce(MPI_IN_PLACE, host, N, MPI_INT, MPI_SUM, c), t, it, "host MPI_Allreduce");
        check(host, t, it, 8, "host allreduce");
        /* now and then a communicator of its own: duplicated, used on device buffers, freed; its
         * first (blocking) collective makes its NCCL communicator or takes over one that another
         * thread's freed communicator left (NCCLMPI_COMM_CACHE), while the other threads do the same */
        if (it % 25 == 3) {
            MPI_Comm x;
            ok(MPI_Comm_dup(c, &x), t, it, "MPI_Comm_dup");
            fill(dev(t, 1), t, it, 10);
            poison(dev(t, BURST + 1));
            ok(MPI_Allreduce(dev(t, 1), dev(t, BURST + 1), N, MPI_INT, MPI_SUM, x), t, it, "MPI_Allreduce on a new comm");
            check(dev(t, BURST + 1), t, it, 10, "allreduce on a new comm");
            fill(dev(t, 1), t, it, 9);
            poison(dev(t, BURST + 1));
            ok(MPI_Iallreduce(dev(t, 1), dev(t, BURST + 1), N, MPI_INT, MPI_SUM, x, &q[0]), t, it, "MPI_Iallreduce on a new comm");
            ok(MPI_Comm_free(&x), t, it, "MPI_Comm_free with a request outstanding");
            ok(MPI_Wait(&q[0], MPI_STATUS_IGNORE), t, it, "MPI_Wait after MPI_Comm_free");
            check(dev(t, BURST + 1), t, it, 9, "allreduce on a freed comm");
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        printf("mt_engine_prog: skipped (MPI_THREAD_MULTIPLE not provided)\n");
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    void *drv = stand_in_driver("mt_engine_prog", THREADS * BUFS_PER_THREAD, N * sizeof(int), bufs);
    group_begin = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    group_end = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    int (*route)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!drv || !group_begin || !group_end || !route) {
        printf("mt_engine_prog: needs libncclmpi and the stand-in driver\n");
        MPI_Finalize();
        return 2;
    }
    for (int t = 0; t < THREADS; t++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, run, (void *)(long)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) MPI_Comm_free(&comms[t]);
    unsigned long long nccl = 0, staged = 0, fused = 0;
    route("Iallreduce", NCCLMPI_ROUTE_NCCL, &nccl);
    route("Iallreduce", NCCLMPI_ROUTE_STAGED, &staged);
    route("Iallreduce", NCCLMPI_ROUTE_FUSED, &fused);
    /* the device MPI_Iallreduce ran on the NCCL route (a stand-in NCCL communicator of one rank),
     * but for those issued on a communicator before its NCCL communicator existed (staged: a
     * nonblocking call never creates one); the counters may lose an increment when threads race
     * (ncclmpi.h), so: nothing counted twice, most on the NCCL route */
    const unsigned long long all = (unsigned long long)THREADS * (ITERS * (BURST + GROUP) + (ITERS + 21) / 25);
    if (nccl + staged > all || nccl < all * 9 / 10)
        fail("%llu MPI_Iallreduce on the NCCL route and %llu staged, of %llu", nccl, staged, all);
    /* the explicit groups' operations (GROUP of one type and op: NCCLMPI_FUSE_MIN) shared calls,
     * the threads' at once (bursts do not coalesce under MPI_THREAD_MULTIPLE) */
    if (fused < (unsigned long long)THREADS * ITERS * GROUP * 9 / 10 || fused > nccl)
        fail("%llu MPI_Iallreduce fused, of %llu in explicit groups", fused, (unsigned long long)THREADS * ITERS * GROUP);
    MPI_Finalize();
    if (failures) return 1;
    printf("mt_engine_prog: ok (%d threads x %d iterations, MPI_Iallreduce: %llu on the NCCL route, %llu staged, %llu fused)\n",
           THREADS, ITERS, nccl, staged, fused);
    return 0;
}
