/* rma_device: one-sided communication (MPI_Win_create) whose window memory is device memory,
 * with origin and result buffers in device or host memory: fences, accumulates of ints and
 * doubles, Get_accumulate, Fetch_and_op and Compare_and_swap atomicity under passive target,
 * mutual exclusion of exclusive locks, post/start/complete/wait (and Win_test), derived datatypes
 * at origin and target, request-based calls, the window's attributes, a window with host memory
 * on rank 0 and device memory elsewhere, device buffers with windows in host memory that the real
 * MPI allocates (MPI_Win_allocate, MPI_Win_allocate_shared) or that are dynamic, a zero-size window, local reads of the own window
 * after MPI_Win_sync, the unified memory model (a put under a lock is in the target's device
 * memory after the unlock and a barrier, with no call at the target), MPI_PROC_NULL targets with
 * device buffers, and (device builds) the IPC route counters. Every value is checked against what MPI-3.1 (unified model) gives, computed
 * here; outputs are poisoned first (0xA5 bytes), and what a call must not write keeps its bytes.
 *
 * Built three ways: -DNM_GPU_TEST (cudaMalloc memory), -DNM_STAND_IN_TEST (memory of the
 * stand-in CUDA driver: no GPU needed) and -DNM_HOST_REF (malloc memory, no CUDA: the same
 * program against the real MPI alone, which validates the checks themselves). The device builds
 * skip (exit 77) without a GPU or the stand-in driver, or without ncclmpi in the process.
 * 1 to 4 ranks, run with --mca osc ^ucx (as test/run_mpi.sh does): with Open MPI 4.1's default
 * choice of one-sided component, MPI_Win_create fails with MPI_ERR_WIN at one rank. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>

#if defined(NM_GPU_TEST)
#include <cuda_runtime.h>
static void *dev_new(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static void dev_free(void *p) { cudaFree(p); }
static void to_dev(void *dst, const void *src, size_t n)
{
    if (cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
}
static void from_dev(void *dst, const void *src, size_t n)
{
    if (cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
}
static int dev_init(int r)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 0;
    cudaSetDevice(r % ndev);
    return 1;
}
#elif defined(NM_STAND_IN_TEST) /* the stand-in driver's device memory is host memory it tracks */
#include "../unit/stand_in.h"
enum { NBUF = 24, BUFSZ = 256 * 1024 };
static CUdeviceptr bufs[NBUF];
static int used[NBUF];
static void *dev_new(size_t n)
{
    void *p = stand_in_take(bufs, used, NBUF, BUFSZ, n);
    if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static void dev_free(void *p) { stand_in_give(bufs, used, NBUF, p); }
static void to_dev(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void from_dev(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static int dev_init(int r)
{
    (void)r;
    return stand_in_driver("rma_device", NBUF, BUFSZ, bufs) != NULL;
}
#elif defined(NM_HOST_REF) /* host memory throughout: the reference run on the real MPI */
static void *dev_new(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static void dev_free(void *p) { free(p); }
static void to_dev(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void from_dev(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static int dev_init(int r) { return r >= 0; }
#else
#error "build with -DNM_GPU_TEST, -DNM_STAND_IN_TEST or -DNM_HOST_REF"
#endif

static const MPI_Comm W = MPI_COMM_WORLD;
static int rank, size, next, prev, failures;
static long checks;
static const char *tcase = "init";
static int POISON; /* an int of 0xA5 bytes */

/* ---- checks: each counts once; a failure prints what, got and want ------------------------ */
static void vfail(const char *got, const char *want, const char *fmt, va_list ap)
{
    char what[256];
    vsnprintf(what, sizeof(what), fmt, ap);
    failures++;
    fprintf(stderr, "rma_device: rank %d: %s: %s (got %s want %s)\n", rank, tcase, what, got, want);
}
__attribute__((format(printf, 3, 4))) static void EQ(long long got, long long want, const char *fmt, ...)
{
    char g[32], w[32];
    va_list ap;
    checks++;
    if (got == want) return;
    snprintf(g, sizeof(g), "%lld", got), snprintf(w, sizeof(w), "%lld", want);
    va_start(ap, fmt), vfail(g, w, fmt, ap), va_end(ap);
}
__attribute__((format(printf, 3, 4))) static void EQD(double got, double want, const char *fmt, ...)
{
    char g[40], w[40];
    va_list ap;
    checks++;
    if (got == want) return;
    snprintf(g, sizeof(g), "%.17g", got), snprintf(w, sizeof(w), "%.17g", want);
    va_start(ap, fmt), vfail(g, w, fmt, ap), va_end(ap);
}
/* n ints: the first that differs is reported */
static void eq_ints(const int *got, const int *want, int n, const char *what)
{
    int i = 0;
    while (i < n - 1 && got[i] == want[i]) i++;
    EQ(got[i], want[i], "%s: element %d of %d", what, i, n);
}
static int ok_(int rc, const char *call, int line)
{
    checks++;
    if (rc == MPI_SUCCESS) return 1;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    failures++;
    fprintf(stderr, "rma_device: rank %d: %s: line %d: %s: %s (got rc %d want MPI_SUCCESS)\n", rank, tcase, line,
            call, msg, rc);
    return 0;
}
#define OK(call) ok_((call), #call, __LINE__)

/* ---- data -------------------------------------------------------------------------------- */
static int ival(int r, int i) { return 1000 * (r + 1) + i; }                  /* initial contents */
static int aval(int r, int c, int i) { return 100000 * c + 1000 * (r + 1) + i; } /* case c's data */
static void *dev_ints(const int *v, int n) /* a device copy of v */
{
    void *d = dev_new(n * sizeof(int));
    to_dev(d, v, n * sizeof(int));
    return d;
}
static void *dev_poisoned(size_t n)
{
    void *d = dev_new(n), *h = malloc(n);
    memset(h, 0xA5, n);
    to_dev(d, h, n);
    free(h);
    return d;
}
static void poison(void *h, size_t n) { memset(h, 0xA5, n); }
/* a window over base on every rank, errors returned; MPI_WIN_NULL (the case is skipped) unless
 * every rank has it */
static MPI_Win mkwin(void *base, MPI_Aint bytes, int du)
{
    MPI_Win w = MPI_WIN_NULL;
    int made = OK(MPI_Win_create(base, bytes, du, MPI_INFO_NULL, W, &w)), all = 0;
    if (made) made = OK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    OK(MPI_Allreduce(&made, &all, 1, MPI_INT, MPI_MIN, W));
    return all ? w : MPI_WIN_NULL;
}
static void freewin(MPI_Win *w)
{
    OK(MPI_Win_free(w));
    EQ(*w == MPI_WIN_NULL, 1, "MPI_Win_free sets the handle to MPI_WIN_NULL");
}
/* n ints of rank `who`'s window at disp, read in a shared-lock epoch of its own */
static void win_read(MPI_Win w, int who, MPI_Aint disp, int n, int *out)
{
    poison(out, n * sizeof(int));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, who, 0, w));
    OK(MPI_Get(out, n, MPI_INT, who, disp, n, MPI_INT, w));
    OK(MPI_Win_unlock(who, w));
}

/* 1. fences: Puts from host and device origins, Gets into device and host buffers */
static void t_fence(void)
{
    enum { N = 16 };
    int init[N], hp[4], dv[4], got[N + 4], want[N + 4];
    tcase = "fence";
    for (int i = 0; i < N; i++) init[i] = ival(rank, i);
    for (int i = 0; i < 4; i++) hp[i] = aval(rank, 1, i), dv[i] = aval(rank, 2, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(dv, 4), *dg = dev_poisoned((N + 4) * sizeof(int));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, w));
    OK(MPI_Put(hp, 4, MPI_INT, next, 0, 4, MPI_INT, w));
    OK(MPI_Put(dp, 4, MPI_INT, next, 4, 4, MPI_INT, w));
#ifndef NM_HOST_REF
    /* past the end of next's window: MPI_ERR_RMA_RANGE, nothing written, a request left null */
    {
        int cls = -1;
        MPI_Request q = (MPI_Request)(uintptr_t)-1;
        checks++;
        MPI_Error_class(MPI_Put(dp, 4, MPI_INT, next, N - 2, 4, MPI_INT, w), &cls);
        EQ(cls, MPI_ERR_RMA_RANGE, "error class of a Put past the end of the target's window");
        MPI_Error_class(MPI_Rput(dp, 4, MPI_INT, next, -1, 4, MPI_INT, w, &q), &cls);
        EQ(cls, MPI_ERR_RMA_RANGE, "error class of an Rput before the start of the target's window");
        EQ(q == MPI_REQUEST_NULL, 1, "the failed Rput's request is MPI_REQUEST_NULL");
    }
#endif
    /* MPI_PROC_NULL: nothing moves, the device buffers included */
    OK(MPI_Put(dp, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, w));
    OK(MPI_Get(dg, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, w));
    OK(MPI_Win_fence(0, w));
    from_dev(got, dg, 4 * sizeof(int));
    for (int i = 0; i < 4; i++) want[i] = POISON;
    eq_ints(got, want, 4, "device buffer of a Get from MPI_PROC_NULL");
    from_dev(got, win_mem, N * sizeof(int));
    for (int i = 0; i < N; i++) want[i] = i < 4 ? aval(prev, 1, i) : i < 8 ? aval(prev, 2, i - 4) : ival(rank, i);
    eq_ints(got, want, N, "own window after Puts from prev");
    /* the whole window of next into device memory (4 ints past it stay), its upper half into host */
    int hg[N / 2 + 1];
    poison(hg, sizeof(hg));
    OK(MPI_Get(dg, N, MPI_INT, next, 0, N, MPI_INT, w));
    OK(MPI_Get(hg, N / 2, MPI_INT, next, 8, N / 2, MPI_INT, w));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    for (int i = 0; i < N + 4; i++)
        want[i] = i < 4 ? aval(rank, 1, i) : i < 8 ? aval(rank, 2, i - 4) : i < N ? ival(next, i) : POISON;
    from_dev(got, dg, sizeof(got));
    eq_ints(got, want, N + 4, "Get of next's window into device memory");
    for (int i = 0; i <= N / 2; i++) want[i] = i < N / 2 ? ival(next, 8 + i) : POISON;
    eq_ints(hg, want, N / 2 + 1, "Get of next's window into host memory");
    freewin(&w);
out:
    dev_free(win_mem), dev_free(dp), dev_free(dg);
}

/* 2. accumulates into rank 0 (a window of ints, then doubles, displacements in bytes) */
enum { I_SUM = 0, I_MAX = 4, I_REP = 8, I_GACC = 12, NI = 16, D_SUM = 0, D_MAX = 4, ND = 8, GACC0 = 5000 };
static void acc_init(int r, int *iv, double *dv)
{
    for (int i = 0; i < NI; i++)
        iv[i] = i < I_MAX || (i >= I_REP && i < I_GACC) ? ival(r, i)
                : i < I_REP ? (i % 2 ? 1000000 + i : -1000 - i) /* MPI_MAX keeps the odd ones */
                            : GACC0;
    for (int i = 0; i < ND; i++) dv[i] = i < D_MAX ? ival(r, i) + 0.125 : i % 2 ? 1e9 : -1e9;
}
struct accwin { int iv[NI]; double dv[ND]; };
static void t_accumulate(void)
{
    tcase = "accumulate";
    struct accwin init, got;
    const MPI_Aint DOFF = (MPI_Aint)((char *)init.dv - (char *)&init);
    acc_init(rank, init.iv, init.dv);
    void *win_mem = dev_new(sizeof(init));
    to_dev(win_mem, &init, sizeof(init));
    int iorig[9];
    double dsum[4], dmax[4];
    for (int i = 0; i < 4; i++) {
        iorig[i] = (rank + 1) * 10 + i, iorig[4 + i] = rank * 100 + i;
        dsum[i] = (rank + 1) * 0.5 + i * 0.25, dmax[i] = rank * 1.5 - i;
    }
    iorig[8] = aval(rank, 2, 0);
    void *di = dev_ints(iorig, 9), *dres = dev_poisoned(2 * sizeof(int));
    MPI_Win w = mkwin(win_mem, sizeof(init), 1);
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, w));
    OK(MPI_Accumulate(di, 4, MPI_INT, 0, I_SUM * sizeof(int), 4, MPI_INT, MPI_SUM, w));
    OK(MPI_Accumulate((int *)di + 4, 4, MPI_INT, 0, I_MAX * sizeof(int), 4, MPI_INT, MPI_MAX, w));
    OK(MPI_Accumulate((int *)di + 8, 1, MPI_INT, 0, (I_REP + rank) * sizeof(int), 1, MPI_INT, MPI_REPLACE, w));
    OK(MPI_Accumulate(dsum, 4, MPI_DOUBLE, 0, DOFF + D_SUM * sizeof(double), 4, MPI_DOUBLE, MPI_SUM, w));
    OK(MPI_Accumulate(dmax, 4, MPI_DOUBLE, 0, DOFF + D_MAX * sizeof(double), 4, MPI_DOUBLE, MPI_MAX, w));
    OK(MPI_Win_fence(0, w));
    from_dev(&got, win_mem, sizeof(got));
    struct accwin want = init;
    if (rank == 0)
        for (int i = 0; i < 4; i++) {
            for (int r = 0; r < size; r++)
                want.iv[I_SUM + i] += (r + 1) * 10 + i, want.dv[D_SUM + i] += (r + 1) * 0.5 + i * 0.25;
            if (i % 2 == 0) want.iv[I_MAX + i] = (size - 1) * 100 + i, want.dv[D_MAX + i] = (size - 1) * 1.5 - i;
            if (i < size) want.iv[I_REP + i] = aval(i, 2, 0);
        }
    for (int i = 0; i < NI; i++) EQ(got.iv[i], want.iv[i], "int %d of the window after MPI_SUM/MPI_MAX/MPI_REPLACE", i);
    for (int i = 0; i < ND; i++) EQD(got.dv[i], want.dv[i], "double %d of the window after MPI_SUM/MPI_MAX", i);
    OK(MPI_Win_fence(0, w)); /* rank 0's local reads end before the next epoch's accesses */
    /* Get_accumulate: rank r adds 2^r, each fetched old value is the initial value plus the bits of
     * the ranks serialised before it */
    int bit = 1 << rank, res[2], all[4];
    OK(MPI_Get_accumulate(&bit, 1, MPI_INT, dres, 1, MPI_INT, 0, I_GACC * sizeof(int), 1, MPI_INT, MPI_SUM, w));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    from_dev(res, dres, sizeof(res));
    EQ(res[1], POISON, "the int after Get_accumulate's result buffer");
    int d = res[0] - GACC0;
    EQ(d >= 0 && d < (1 << size) && !(d & bit), 1, "Get_accumulate fetched %d: initial plus other ranks' bits", res[0]);
    OK(MPI_Gather(res, 1, MPI_INT, all, 1, MPI_INT, 0, W));
    if (rank == 0) {
        from_dev(&got, win_mem, sizeof(got));
        EQ(got.iv[I_GACC], GACC0 + (1 << size) - 1, "the window after Get_accumulate");
        int seen = 0, at = GACC0; /* follow the chain: the rank that fetched `at` comes next */
        for (int k = 0; k < size; k++) {
            int r = 0;
            while (r < size && ((seen >> r & 1) || all[r] != at)) r++;
            EQ(r < size, 1, "Get_accumulate: a rank fetched %d (step %d of the serial order)", at, k);
            if (r == size) break;
            seen |= 1 << r, at += 1 << r;
        }
    }
    freewin(&w);
out:
    dev_free(win_mem), dev_free(di), dev_free(dres);
}

/* 3. Fetch_and_op on rank 0's counter in a lock_all epoch: every ticket handed out once */
static void t_fetch_and_op(void)
{
    enum { K = 50 };
    tcase = "fetch_and_op";
    int zero = 0, one = 1, hres[K], dgot[K], mine[K], *all = malloc(K * size * sizeof(int)), cnt = -1;
    void *win_mem = dev_ints(&zero, 1), *done = dev_ints(&one, 1), *dres = dev_poisoned(K * sizeof(int));
    MPI_Win w = mkwin(win_mem, sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Barrier(W));
    poison(hres, sizeof(hres));
    OK(MPI_Win_lock_all(0, w));
    for (int k = 0; k < K; k++) {
        void *origin = k % 3 ? (void *)&one : done, *result = k % 2 ? (void *)((int *)dres + k) : &hres[k];
        OK(MPI_Fetch_and_op(origin, result, MPI_INT, 0, 0, MPI_SUM, w));
        OK(MPI_Win_flush(0, w));
    }
    OK(MPI_Win_unlock_all(w));
    from_dev(dgot, dres, sizeof(dgot));
    for (int k = 0; k < K; k++) {
        mine[k] = k % 2 ? dgot[k] : hres[k];
        EQ(k % 2 ? hres[k] : dgot[k], POISON, "result %d went to the other buffer", k);
        if (k) EQ(mine[k] > mine[k - 1], 1, "fetched %d after %d: flushed tickets increase", mine[k], mine[k - 1]);
    }
    OK(MPI_Gather(mine, K, MPI_INT, all, K, MPI_INT, 0, W));
    OK(MPI_Barrier(W));
    if (rank == 0) {
        char *hit = calloc(K * size, 1);
        for (int i = 0; i < K * size; i++) {
            EQ(all[i] >= 0 && all[i] < K * size && !hit[all[i]], 1, "rank %d's ticket %d: once each in [0,%d)", i / K,
               all[i], K * size);
            if (all[i] >= 0 && all[i] < K * size) hit[all[i]] = 1;
        }
        void *dc = dev_poisoned(sizeof(int));
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
        OK(MPI_Get(dc, 1, MPI_INT, 0, 0, 1, MPI_INT, w));
        OK(MPI_Win_unlock(0, w));
        from_dev(&cnt, dc, sizeof(int));
        EQ(cnt, K * size, "the counter at the end");
        free(hit), dev_free(dc);
    }
    freewin(&w);
out:
    free(all), dev_free(win_mem), dev_free(done), dev_free(dres);
}

/* 4. Compare_and_swap 0 -> rank+1 on rank 0: exactly one rank wins */
static void t_cas(void)
{
    tcase = "compare_and_swap";
    int zero = 0, newv = rank + 1, res = -1, all[4], fin[2];
    void *win_mem = dev_ints(&zero, 1), *dnew = dev_ints(&newv, 1), *dres = dev_poisoned(2 * sizeof(int));
    MPI_Win w = mkwin(win_mem, sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Barrier(W));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
    OK(MPI_Compare_and_swap(dnew, &zero, dres, MPI_INT, 0, 0, w));
    OK(MPI_Win_unlock(0, w));
    int r2[2];
    from_dev(r2, dres, sizeof(r2));
    res = r2[0];
    EQ(r2[1], POISON, "the int after the result buffer");
    OK(MPI_Gather(&res, 1, MPI_INT, all, 1, MPI_INT, 0, W));
    OK(MPI_Barrier(W));
    if (rank == 0) {
        int winner = -1, nwin = 0;
        for (int r = 0; r < size; r++)
            if (all[r] == 0) nwin++, winner = r;
        EQ(nwin, 1, "ranks that saw the initial 0");
        for (int r = 0; r < size && nwin == 1; r++)
            if (r != winner) EQ(all[r], winner + 1, "rank %d's result after rank %d won", r, winner);
        win_read(w, 0, 0, 1, fin);
        EQ(fin[0], winner + 1, "the slot at the end (winner %d)", winner);
    }
    freewin(&w);
out:
    dev_free(win_mem), dev_free(dnew), dev_free(dres);
}

/* 5. read-modify-write through Get / flush / Put under an exclusive lock: no update lost */
static void t_exclusive(void)
{
    enum { K = 20 };
    tcase = "exclusive lock";
    int zero = 0, v = -1, seen[K], *all = malloc(K * size * sizeof(int)), fin[1];
    void *win_mem = dev_ints(&zero, 1), *dg = dev_poisoned(sizeof(int));
    MPI_Win w = mkwin(win_mem, sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Barrier(W));
    for (int k = 0; k < K; k++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        OK(MPI_Get(dg, 1, MPI_INT, 0, 0, 1, MPI_INT, w));
        OK(MPI_Win_flush(0, w));
        from_dev(&v, dg, sizeof(int));
        seen[k] = v++;
        to_dev(dg, &v, sizeof(int));
        OK(MPI_Put(dg, 1, MPI_INT, 0, 0, 1, MPI_INT, w));
        OK(MPI_Win_unlock(0, w));
    }
    OK(MPI_Gather(seen, K, MPI_INT, all, K, MPI_INT, 0, W));
    OK(MPI_Barrier(W));
    if (rank == 0) {
        char *hit = calloc(K * size, 1);
        for (int i = 0; i < K * size; i++) {
            EQ(all[i] >= 0 && all[i] < K * size && !hit[all[i]], 1, "rank %d read %d: each value once", i / K, all[i]);
            if (all[i] >= 0 && all[i] < K * size) hit[all[i]] = 1;
        }
        win_read(w, 0, 0, 1, fin);
        EQ(fin[0], K * size, "the counter at the end");
        free(hit);
    }
    freewin(&w);
out:
    free(all), dev_free(win_mem), dev_free(dg);
}

/* 6. post/start/complete/wait with the ring neighbours; the second round completes by Win_test */
static void t_pscw(void)
{
    enum { N = 8 };
    tcase = "pscw";
    int init[N], hv[4], dv[4], got[N], want[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i);
    for (int i = 0; i < 4; i++) dv[i] = aval(rank, 6, i), hv[i] = aval(rank, 7, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(dv, 4), *dg = dev_poisoned(5 * sizeof(int));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    MPI_Group wg, from, to;
    OK(MPI_Comm_group(W, &wg));
    OK(MPI_Group_incl(wg, 1, &prev, &from));
    OK(MPI_Group_incl(wg, 1, &next, &to));
    for (int round = 0; round < 2; round++) {
        OK(MPI_Win_post(from, 0, w));
        OK(MPI_Win_start(to, 0, w));
        if (round == 0) OK(MPI_Put(dp, 4, MPI_INT, next, 0, 4, MPI_INT, w));
        else {
            OK(MPI_Put(hv, 4, MPI_INT, next, 4, 4, MPI_INT, w));
            OK(MPI_Get(dg, 4, MPI_INT, next, 0, 4, MPI_INT, w));
        }
        OK(MPI_Win_complete(w));
        if (round == 0) OK(MPI_Win_wait(w));
        else {
            int flag = 0;
            int rc = MPI_SUCCESS;
            for (double t0 = MPI_Wtime(); !flag && rc == MPI_SUCCESS && MPI_Wtime() - t0 < 60;)
                rc = MPI_Win_test(w, &flag);
            if (OK(rc)) EQ(flag, 1, "MPI_Win_test completed the exposure epoch within 60 s");
        }
        from_dev(got, win_mem, sizeof(got));
        for (int i = 0; i < N; i++)
            want[i] = i < 4 ? aval(prev, 6, i) : round ? aval(prev, 7, i - 4) : ival(rank, i);
        eq_ints(got, want, N, round ? "own window after round 2 (Win_test)" : "own window after round 1 (Win_wait)");
    }
    int g[5];
    from_dev(g, dg, sizeof(g));
    for (int i = 0; i < 5; i++) want[i] = i < 4 ? aval(rank, 6, i) : POISON;
    eq_ints(g, want, 5, "Get from next in round 2 into device memory");
    OK(MPI_Group_free(&from)), OK(MPI_Group_free(&to)), OK(MPI_Group_free(&wg));
    freewin(&w);
out:
    dev_free(win_mem), dev_free(dp), dev_free(dg);
}

/* 7. derived datatypes: a strided target for a Put, strided origins for Gets */
static void t_datatypes(void)
{
    enum { M = 6, N = 2 * M };
    tcase = "datatypes";
    int init[N], v[M], got[N], want[N], hg[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i);
    for (int i = 0; i < M; i++) v[i] = aval(rank, 8, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(v, M), *dg = dev_poisoned(N * sizeof(int));
    MPI_Datatype vec;
    OK(MPI_Type_vector(M, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, w));
    OK(MPI_Put(dp, M, MPI_INT, next, 0, 1, vec, w));
    OK(MPI_Win_fence(0, w));
    from_dev(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = i % 2 ? ival(rank, i) : aval(prev, 8, i / 2);
    eq_ints(got, want, N, "own window after a Put into a vector type (odd elements stay)");
    /* next's first M ints, contiguous, into every other int of device and host buffers */
    poison(hg, sizeof(hg));
    OK(MPI_Get(dg, 1, vec, next, 0, M, MPI_INT, w));
    OK(MPI_Get(hg, 1, vec, next, 0, M, MPI_INT, w));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    for (int i = 0; i < N; i++) {
        int j = i / 2;
        want[i] = i % 2 ? POISON : j % 2 ? ival(next, j) : aval(rank, 8, j / 2);
    }
    from_dev(got, dg, sizeof(got));
    eq_ints(got, want, N, "Get into a vector type in device memory (gaps stay)");
    eq_ints(hg, want, N, "Get into a vector type in host memory (gaps stay)");
    freewin(&w);
out:
    OK(MPI_Type_free(&vec));
    dev_free(win_mem), dev_free(dp), dev_free(dg);
}

/* 8. Rput / Rget / Raccumulate / Rget_accumulate in a lock_all epoch */
static void t_requests(void)
{
    enum { N = 10, R_ACC = 4, R_GACC = 5, R_SRC = 6 };
    tcase = "request-based";
    int init[N], v[4], racc = rank + 1, bit = 1 << rank, got[N], want[N], res[5];
    for (int i = 0; i < N; i++) init[i] = i == R_GACC ? GACC0 : ival(rank, i);
    for (int i = 0; i < 4; i++) v[i] = aval(rank, 9, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(v, 4), *dbit = dev_ints(&bit, 1);
    void *dg = dev_poisoned(5 * sizeof(int)), *dres = dev_poisoned(2 * sizeof(int));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Barrier(W));
    MPI_Request q[4];
    OK(MPI_Win_lock_all(0, w));
    OK(MPI_Rput(dp, 4, MPI_INT, next, 0, 4, MPI_INT, w, &q[0]));
    OK(MPI_Rget(dg, 4, MPI_INT, next, R_SRC, 4, MPI_INT, w, &q[1]));
    OK(MPI_Raccumulate(&racc, 1, MPI_INT, 0, R_ACC, 1, MPI_INT, MPI_SUM, w, &q[2]));
    OK(MPI_Rget_accumulate(dbit, 1, MPI_INT, dres, 1, MPI_INT, 0, R_GACC, 1, MPI_INT, MPI_SUM, w, &q[3]));
    OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < 4; i++) EQ(q[i] == MPI_REQUEST_NULL, 1, "request %d freed by MPI_Waitall", i);
    OK(MPI_Win_flush_all(w));
    OK(MPI_Win_unlock_all(w));
    from_dev(res, dg, sizeof(res));
    for (int i = 0; i < 5; i++) want[i] = i < 4 ? ival(next, R_SRC + i) : POISON;
    eq_ints(res, want, 5, "Rget from next into device memory");
    from_dev(res, dres, 2 * sizeof(int));
    int d = res[0] - GACC0;
    EQ(d >= 0 && d < (1 << size) && !(d & bit), 1, "Rget_accumulate fetched %d: initial plus others' bits", res[0]);
    EQ(res[1], POISON, "the int after Rget_accumulate's result buffer");
    OK(MPI_Barrier(W));
    win_read(w, rank, 0, N, got);
    memcpy(want, init, sizeof(want));
    for (int i = 0; i < 4; i++) want[i] = aval(prev, 9, i);
    if (rank == 0) want[R_ACC] += size * (size + 1) / 2, want[R_GACC] += (1 << size) - 1;
    eq_ints(got, want, N, "own window after the request-based calls");
    freewin(&w);
out:
    dev_free(win_mem), dev_free(dp), dev_free(dbit), dev_free(dg), dev_free(dres);
}

/* 9. the window's attributes give back what Win_create was given */
static void t_attrs(void)
{
    tcase = "attributes";
    MPI_Aint bytes = (rank + 1) * 3 * sizeof(double);
    int du = rank % 2 ? 1 : (int)sizeof(double), flag = 0;
    void *win_mem = dev_new(bytes), *base = NULL;
    MPI_Aint *psize = NULL;
    int *pdu = NULL, *pflavor = NULL;
    MPI_Win w = mkwin(win_mem, bytes, du);
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_get_attr(w, MPI_WIN_BASE, &base, &flag));
    EQ(flag, 1, "MPI_WIN_BASE is set");
    EQ((long long)(uintptr_t)base, (long long)(uintptr_t)win_mem, "MPI_WIN_BASE");
    flag = 0;
    OK(MPI_Win_get_attr(w, MPI_WIN_SIZE, &psize, &flag));
    EQ(flag && psize, 1, "MPI_WIN_SIZE is set");
    if (flag && psize) EQ(*psize, bytes, "MPI_WIN_SIZE");
    flag = 0;
    OK(MPI_Win_get_attr(w, MPI_WIN_DISP_UNIT, &pdu, &flag));
    EQ(flag && pdu, 1, "MPI_WIN_DISP_UNIT is set");
    if (flag && pdu) EQ(*pdu, du, "MPI_WIN_DISP_UNIT");
    flag = 0;
    OK(MPI_Win_get_attr(w, MPI_WIN_CREATE_FLAVOR, &pflavor, &flag));
    EQ(flag && pflavor && *pflavor == MPI_WIN_FLAVOR_CREATE, 1, "MPI_WIN_CREATE_FLAVOR is MPI_WIN_FLAVOR_CREATE");
    freewin(&w);
out:
    dev_free(win_mem);
}

/* 10. rank 0's window in host memory, the others' in device memory */
static void t_mixed(void)
{
    enum { N = 8 };
    tcase = "mixed window";
    int init[N], hv[4], c[2], got[N], want[N], g[3];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i);
    for (int i = 0; i < 4; i++) hv[i] = aval(rank, 10, i);
    for (int i = 0; i < 2; i++) c[i] = (rank + 1) * (i + 1);
    void *win_mem = rank ? dev_ints(init, N) : malloc(sizeof(init));
    void *dc = dev_ints(c, 2), *dg = dev_poisoned(3 * sizeof(int));
    if (!rank) memcpy(win_mem, init, sizeof(init));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, w));
    OK(MPI_Put(hv, 4, MPI_INT, next, 0, 4, MPI_INT, w));
    OK(MPI_Accumulate(dc, 2, MPI_INT, 0, 4, 2, MPI_INT, MPI_SUM, w));
    OK(MPI_Get(dg, 2, MPI_INT, prev, 6, 2, MPI_INT, w));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    if (rank) from_dev(got, win_mem, sizeof(got));
    else memcpy(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = i < 4 ? aval(prev, 10, i) : init[i];
    if (rank == 0)
        for (int i = 0; i < 2; i++) want[4 + i] += (i + 1) * size * (size + 1) / 2;
    eq_ints(got, want, N, rank ? "own device window" : "own host window");
    from_dev(g, dg, sizeof(g));
    for (int i = 0; i < 3; i++) want[i] = i < 2 ? ival(prev, 6 + i) : POISON;
    eq_ints(g, want, 3, "Get from prev into device memory");
    freewin(&w);
out:
    if (rank) dev_free(win_mem);
    else free(win_mem);
    dev_free(dc), dev_free(dg);
}

/* 10b. windows the real MPI allocates (MPI_Win_allocate, MPI_Win_allocate_shared) and a dynamic
 * window with attached host memory: host memory on every rank, with origin, result and compare
 * buffers in device memory (staged); their results come back at the fence, flush, unlock or
 * request completion that completes the call. */
static void t_host_flavors(void)
{
    enum { N = 12, CNT = 9, CASX = 10 };
    tcase = "device buffers, MPI_Win_allocate window";
    int pv[4], one = 1, got[N], want[N], *all = malloc(sizeof(int) * 2 * size);
    for (int i = 0; i < 4; i++) pv[i] = aval(rank, 20, i);
    void *dp = dev_ints(pv, 4), *dg = dev_poisoned(5 * sizeof(int)), *done = dev_ints(&one, 1);
    void *dres = dev_poisoned(2 * sizeof(int)), *dcmp = dev_poisoned(sizeof(int));
    int *mem = NULL;
    MPI_Win w = MPI_WIN_NULL;
    if (OK(MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, W, &mem, &w))) {
        OK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
        for (int i = 0; i < N; i++) mem[i] = ival(rank, i);
        OK(MPI_Win_fence(0, w));
        OK(MPI_Put(dp, 4, MPI_INT, next, 0, 4, MPI_INT, w));
        OK(MPI_Get(dg, 4, MPI_INT, prev, 4, 4, MPI_INT, w));
        OK(MPI_Accumulate(done, 1, MPI_INT, 0, 8, 1, MPI_INT, MPI_SUM, w));
        OK(MPI_Win_fence(0, w));
        for (int i = 0; i < N; i++) want[i] = i < 4 ? aval(prev, 20, i) : ival(rank, i);
        if (rank == 0) want[8] += size;
        eq_ints(mem, want, N, "own MPI_Win_allocate window after a fence epoch");
        from_dev(got, dg, 5 * sizeof(int));
        for (int i = 0; i < 5; i++) want[i] = i < 4 ? ival(prev, 4 + i) : POISON;
        eq_ints(got, want, 5, "Get from prev's MPI_Win_allocate window into device memory, completed by the fence");
        OK(MPI_Win_fence(0, w)); /* (the local reads end before the passive epochs) */
        /* passive target: tickets from rank 0's counter (element CNT) into device memory, one
         * winner of a compare-and-swap whose compare value is in device memory */
        OK(MPI_Win_lock_all(0, w));
        OK(MPI_Fetch_and_op(done, dres, MPI_INT, 0, CNT, MPI_SUM, w));
        OK(MPI_Win_flush(0, w));
        int cmp = ival(0, CASX), mine = aval(rank, 21, 0);
        to_dev(dcmp, &cmp, sizeof(int));
        OK(MPI_Compare_and_swap(&mine, dcmp, (int *)dres + 1, MPI_INT, 0, CASX, w));
        OK(MPI_Win_flush_all(w));
        /* request-based: a get into device memory, a put from it, each complete at its wait */
        MPI_Request q[2];
        OK(MPI_Rget(dg, 2, MPI_INT, next, 0, 2, MPI_INT, w, &q[0]));
        OK(MPI_Waitall(1, q, MPI_STATUSES_IGNORE));
        from_dev(got, dg, 2 * sizeof(int));
        want[0] = aval(rank, 20, 0), want[1] = aval(rank, 20, 1);
        eq_ints(got, want, 2, "Rget from next's MPI_Win_allocate window into device memory, at its MPI_Wait");
        /* MPI_BOTTOM with a datatype that places the origin in device memory (absolute address) */
        MPI_Aint at;
        int bl = 2;
        MPI_Datatype absdev;
        MPI_Get_address(dp, &at);
        OK(MPI_Type_create_hindexed(1, &bl, &at, MPI_INT, &absdev));
        OK(MPI_Type_commit(&absdev));
        OK(MPI_Put(MPI_BOTTOM, 1, absdev, next, 4, 2, MPI_INT, w));
        OK(MPI_Win_unlock_all(w));
        MPI_Type_free(&absdev);
        from_dev(got, dres, 2 * sizeof(int));
        OK(MPI_Allgather(got, 2, MPI_INT, all, 2, MPI_INT, W));
        int winners = 0;
        for (int v = 0; v < size; v++) {
            int n = 0;
            for (int r = 0; r < size; r++) n += all[2 * r] == ival(0, CNT) + v;
            EQ(n, 1, "Fetch_and_op into device memory: old value %d fetched, times", ival(0, CNT) + v);
        }
        for (int r = 0; r < size; r++) winners += all[2 * r + 1] == ival(0, CASX);
        EQ(winners, 1, "Compare_and_swap with a device compare value: ranks that saw the initial value");
        OK(MPI_Barrier(W));
        if (rank == 0) {
            EQ(mem[CNT], ival(0, CNT) + size, "rank 0's counter after every rank's Fetch_and_op");
            int wins = 0;
            for (int r = 0; r < size; r++) wins += mem[CASX] == aval(r, 21, 0);
            EQ(wins, 1, "rank 0's compare-and-swap element holds one rank's value: %d", mem[CASX]);
        }
        want[0] = aval(prev, 20, 0), want[1] = aval(prev, 20, 1);
        eq_ints(mem + 4, want, 2, "own window after prev's Put from MPI_BOTTOM (device memory)");
        OK(MPI_Barrier(W));
        freewin(&w);
    }

    tcase = "device buffers, MPI_Win_allocate_shared window";
    MPI_Comm node;
    OK(MPI_Comm_split_type(W, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nr, ns;
    MPI_Comm_rank(node, &nr), MPI_Comm_size(node, &ns);
    if (OK(MPI_Win_allocate_shared(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mem, &w))) {
        OK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
        for (int i = 0; i < 4; i++) mem[i] = POISON;
        OK(MPI_Win_fence(0, w));
        OK(MPI_Put(dp, 4, MPI_INT, (nr + 1) % ns, 0, 4, MPI_INT, w));
        OK(MPI_Win_fence(0, w));
        for (int i = 0; i < 4; i++) want[i] = aval(rank, 20, i); /* (every rank of W on one node here) */
        int *theirs = NULL, du = 0;
        MPI_Aint sz = 0;
        OK(MPI_Win_shared_query(w, (nr + 1) % ns, &sz, &du, &theirs));
        if (theirs && ns == size) eq_ints(theirs, want, 4, "next's shared window after my Put from device memory");
        OK(MPI_Win_fence(0, w));
        freewin(&w);
    }
    MPI_Comm_free(&node);

    tcase = "device buffers, dynamic window";
    if (OK(MPI_Win_create_dynamic(MPI_INFO_NULL, W, &w))) {
        OK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
        int att[N];
        for (int i = 0; i < N; i++) att[i] = ival(rank, i);
        OK(MPI_Win_attach(w, att, sizeof(att)));
        MPI_Aint at, *where = malloc(sizeof(MPI_Aint) * size);
        MPI_Get_address(att, &at);
        OK(MPI_Allgather(&at, 1, MPI_AINT, where, 1, MPI_AINT, W));
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, w));
        OK(MPI_Put(dp, 4, MPI_INT, next, where[next] + 2 * sizeof(int), 4, MPI_INT, w));
        OK(MPI_Win_unlock(next, w));
        OK(MPI_Barrier(W));
        OK(MPI_Win_lock(MPI_LOCK_SHARED, prev, 0, w));
        OK(MPI_Get(dg, 5, MPI_INT, prev, where[prev] + 7 * sizeof(int), 5, MPI_INT, w));
        OK(MPI_Win_unlock(prev, w));
        for (int i = 0; i < N; i++) want[i] = i >= 2 && i < 6 ? aval(prev, 20, i - 2) : ival(rank, i);
        eq_ints(att, want, N, "own attached memory after prev's Put from device memory");
        from_dev(got, dg, 5 * sizeof(int));
        for (int i = 0; i < 5; i++) want[i] = ival(prev, 7 + i);
        eq_ints(got, want, 5, "Get from prev's attached memory into device memory, at the unlock");
        OK(MPI_Barrier(W));
        OK(MPI_Win_detach(w, att));
        freewin(&w);
        free(where);
    }
    dev_free(dp), dev_free(dg), dev_free(done), dev_free(dres), dev_free(dcmp);
    free(all);
}

/* 11. the last rank's window is empty (size 0, base NULL); the others Put to each other, and the
 * last rank Puts into rank 0 */
static void t_zero_size(void)
{
    enum { N = 8 };
    tcase = "zero-size window";
    const int empty = rank == size - 1, nwin = size - 1; /* ranks with memory: 0 .. size-2 */
    int init[N], v[4], got[N], want[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i);
    for (int i = 0; i < 4; i++) v[i] = aval(rank, 11, i);
    void *win_mem = empty ? NULL : dev_ints(init, N), *dp = dev_ints(v, 4);
    MPI_Win w = mkwin(win_mem, empty ? 0 : N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    MPI_Aint *psize = NULL;
    int flag = 0;
    OK(MPI_Win_get_attr(w, MPI_WIN_SIZE, &psize, &flag));
    EQ(flag && psize ? *psize : -1, empty ? 0 : N * sizeof(int), "MPI_WIN_SIZE");
    OK(MPI_Win_fence(MPI_MODE_NOPRECEDE, w));
    if (!empty) OK(MPI_Put(dp, 4, MPI_INT, (rank + 1) % nwin, 0, 4, MPI_INT, w));
    else if (size > 1) OK(MPI_Put(dp, 4, MPI_INT, 0, 4, 4, MPI_INT, w));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    if (!empty) {
        from_dev(got, win_mem, sizeof(got));
        for (int i = 0; i < N; i++)
            want[i] = i < 4 ? aval((rank + nwin - 1) % nwin, 11, i) : rank == 0 ? aval(size - 1, 11, i - 4) : init[i];
        eq_ints(got, want, N, "own window (the empty window's rank skipped)");
    }
    freewin(&w);
out:
    if (win_mem) dev_free(win_mem);
    dev_free(dp);
}

/* 12. an exclusive lock on the own window: local reads and writes of its device memory after
 * MPI_Win_sync, seen by RMA in the same epoch and by prev afterwards */
static void t_lock_self(void)
{
    enum { N = 4 };
    tcase = "lock self";
    int init[N], hv[N], lv[N], got[N], want[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i), hv[i] = aval(rank, 12, i), lv[i] = aval(rank, 13, i);
    void *win_mem = dev_ints(init, N);
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, w));
    OK(MPI_Put(hv, 2, MPI_INT, rank, 1, 2, MPI_INT, w));
    OK(MPI_Win_flush(rank, w));
    OK(MPI_Win_sync(w));
    from_dev(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = i == 1 || i == 2 ? hv[i - 1] : init[i];
    eq_ints(got, want, N, "local read after a Put to itself, flush and Win_sync");
    to_dev(win_mem, lv, sizeof(lv)); /* local stores, then RMA reads them */
    OK(MPI_Win_sync(w));
    poison(got, sizeof(got));
    OK(MPI_Get(got, N, MPI_INT, rank, 0, N, MPI_INT, w));
    OK(MPI_Win_unlock(rank, w));
    eq_ints(got, lv, N, "Get of the own window after local stores and Win_sync");
    OK(MPI_Barrier(W));
    win_read(w, next, 0, N, got);
    for (int i = 0; i < N; i++) want[i] = aval(next, 13, i);
    eq_ints(got, want, N, "Get from next after its local stores");
    freewin(&w);
out:
    dev_free(win_mem);
}

/* 13. the unified memory model: a put under a lock is in the target's device memory once the
 * origin's unlock returns, with no call on the window at the target (a barrier orders it) */
static void t_unified(void)
{
    enum { N = 4 };
    tcase = "unified model";
    int init[N], pv[N], got[N], want[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i), pv[i] = aval(rank, 14, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(pv, N);
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    int *model = NULL, flag = 0;
    if (OK(MPI_Win_get_attr(w, MPI_WIN_MODEL, &model, &flag))) EQ(flag && model && *model == MPI_WIN_UNIFIED, 1, "MPI_WIN_MODEL is MPI_WIN_UNIFIED");
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, w));
    OK(MPI_Put(dp, N, MPI_INT, next, 0, N, MPI_INT, w));
    OK(MPI_Win_unlock(next, w));
    OK(MPI_Barrier(W));
    from_dev(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = aval(prev, 14, i);
    eq_ints(got, want, N, "own device memory after prev's put, unlock and a barrier");
    OK(MPI_Barrier(W));
    freewin(&w);
out:
    dev_free(win_mem), dev_free(dp);
}

#ifdef NM_TEST_FORTRAN
/* 14. the Fortran entry points (ncclmpi's, found by name; the program links Open MPI's Fortran
 * library): a window in device memory made, queried (MPI_WIN_GET_ATTR gives values, not
 * references), put into through a fence and freed from Fortran */
typedef void (*f_win_create_t)(void *, MPI_Aint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_win_get_attr_t)(MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_put_t)(void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Aint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_win_fence_t)(MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_win_free_t)(MPI_Fint *, MPI_Fint *);
static void *fsym(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    EQ(f != NULL, 1, "Fortran entry point %s found", name);
    return f;
}
static void t_fortran(void)
{
    enum { N = 4 };
    tcase = "fortran";
    f_win_create_t wc = (f_win_create_t)fsym("mpi_win_create_");
    f_win_get_attr_t ga = (f_win_get_attr_t)fsym("mpi_win_get_attr_");
    f_put_t put = (f_put_t)fsym("mpi_put_");
    f_win_fence_t fence = (f_win_fence_t)fsym("mpi_win_fence_");
    f_win_free_t wf = (f_win_free_t)fsym("mpi_win_free_");
    if (!wc || !ga || !put || !fence || !wf) return;
    int init[N], pv[N], got[N], want[N];
    for (int i = 0; i < N; i++) init[i] = ival(rank, i), pv[i] = aval(rank, 15, i);
    void *win_mem = dev_ints(init, N), *dp = dev_ints(pv, N);
    MPI_Aint bytes = N * sizeof(int), v = 0, tdisp = 0;
    MPI_Fint du = sizeof(int), info = MPI_Info_c2f(MPI_INFO_NULL), comm = MPI_Comm_c2f(W), fw = 0, ierr = -1, flag = 0;
    MPI_Fint key, n = N, ty = MPI_Type_c2f(MPI_INT), target = next, zero = 0;
    wc(win_mem, &bytes, &du, &info, &comm, &fw, &ierr);
    EQ(ierr, MPI_SUCCESS, "mpi_win_create_ on device memory");
    if (ierr != MPI_SUCCESS) goto out;
    key = MPI_WIN_BASE;
    ga(&fw, &key, &v, &flag, &ierr);
    EQ(ierr == MPI_SUCCESS && flag && v == (MPI_Aint)(uintptr_t)win_mem, 1, "MPI_WIN_GET_ATTR(MPI_WIN_BASE) is the device base");
    key = MPI_WIN_SIZE;
    ga(&fw, &key, &v, &flag, &ierr);
    EQ(ierr == MPI_SUCCESS && flag ? (long long)v : -1, (long long)bytes, "MPI_WIN_GET_ATTR(MPI_WIN_SIZE)");
    key = MPI_WIN_DISP_UNIT;
    ga(&fw, &key, &v, &flag, &ierr);
    EQ(ierr == MPI_SUCCESS && flag ? (long long)v : -1, (long long)sizeof(int), "MPI_WIN_GET_ATTR(MPI_WIN_DISP_UNIT)");
    fence(&zero, &fw, &ierr);
    put(dp, &n, &ty, &target, &tdisp, &n, &ty, &fw, &ierr);
    EQ(ierr, MPI_SUCCESS, "mpi_put_ of device memory into next's device window");
    fence(&zero, &fw, &ierr);
    from_dev(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = aval(prev, 15, i);
    eq_ints(got, want, N, "own window after prev's Fortran put");
    wf(&fw, &ierr);
    EQ(ierr == MPI_SUCCESS && fw == MPI_Win_c2f(MPI_WIN_NULL), 1, "mpi_win_free_ sets MPI_WIN_NULL");
out:
    dev_free(win_mem), dev_free(dp);
}
#endif

/* RMA_DEVICE_HOSTRANK=1: the last rank never touches CUDA itself (no device chosen, nothing
 * allocated): its window is host memory, and it puts from host memory into its neighbour's
 * device window and fetch-and-adds on rank 0's; the others use device memory */
static void t_hostrank(int host)
{
    enum { N = 4 };
    tcase = "a rank without CUDA";
    int init[N], pv[N], got[N], want[N], one = 1, res = -1, *all = malloc(sizeof(int) * size);
    for (int i = 0; i < N; i++) init[i] = ival(rank, i), pv[i] = aval(rank, 16, i);
    void *win_mem = host ? malloc(sizeof(init)) : dev_ints(init, N), *src = host ? (void *)pv : dev_ints(pv, N);
    void *dres = host ? (void *)&res : dev_poisoned(sizeof(int)), *done = host ? (void *)&one : dev_ints(&one, 1);
    if (host) memcpy(win_mem, init, sizeof(init));
    MPI_Win w = mkwin(win_mem, N * sizeof(int), sizeof(int));
    if (w == MPI_WIN_NULL) goto out;
    OK(MPI_Win_fence(0, w));
    OK(MPI_Put(src, N, MPI_INT, next, 0, N, MPI_INT, w));
    OK(MPI_Win_fence(0, w));
    if (host) memcpy(got, win_mem, sizeof(got));
    else from_dev(got, win_mem, sizeof(got));
    for (int i = 0; i < N; i++) want[i] = aval(prev, 16, i);
    eq_ints(got, want, N, host ? "own host window after prev's put from device memory" : "own device window after prev's put");
    OK(MPI_Barrier(W)); /* (everyone has read its window) */
    /* every rank adds 1 to element 1 of rank 0's window: each fetches a different old value */
    OK(MPI_Win_lock_all(0, w));
    OK(MPI_Fetch_and_op(done, dres, MPI_INT, 0, 1, MPI_SUM, w));
    OK(MPI_Win_unlock_all(w));
    if (!host) from_dev(&res, dres, sizeof(int));
    OK(MPI_Allgather(&res, 1, MPI_INT, all, 1, MPI_INT, W));
    for (int v = 0; v < size; v++) {
        int n = 0;
        for (int r = 0; r < size; r++) n += all[r] == aval(size - 1, 16, 1) + v;
        EQ(n, 1, "fetched old value %d (prev's put plus %d), times", aval(size - 1, 16, 1) + v, v);
    }
    OK(MPI_Barrier(W));
    freewin(&w);
out:
    if (host) free(win_mem);
    else dev_free(win_mem), dev_free(src), dev_free(dres), dev_free(done);
    free(all);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(W, &rank);
    MPI_Comm_size(W, &size);
    next = (rank + 1) % size, prev = (rank + size - 1) % size;
    memset(&POISON, 0xA5, sizeof(POISON));
    const char *hr = getenv("RMA_DEVICE_HOSTRANK");
    const int hostmode = hr && *hr == '1' && size > 1, host = hostmode && rank == size - 1;
#ifndef NM_HOST_REF
    int lib = dlsym(RTLD_DEFAULT, "ncclmpi_get_stats") != NULL;
    if (!lib || (!host && !dev_init(rank))) {
        if (rank == 0) printf("rma_device: skipped (%s)\n", lib ? "no GPU" : "ncclmpi not loaded");
        MPI_Finalize();
        return 77;
    }
#else
    dev_init(rank);
#endif
    if (size > 4) {
        if (rank == 0) fprintf(stderr, "rma_device: run with 1 to 4 ranks\n");
        MPI_Finalize();
        return 2;
    }
    tcase = "setup";
    OK(MPI_Comm_set_errhandler(W, MPI_ERRORS_RETURN));
    if (hostmode) {
        t_hostrank(host);
        goto end;
    }
    t_fence();
    t_accumulate();
    t_fetch_and_op();
    t_cas();
    t_exclusive();
    t_pscw();
    t_datatypes();
    t_requests();
    t_attrs();
    t_mixed();
    t_host_flavors();
    t_zero_size();
    t_lock_self();
    t_unified();
#ifdef NM_TEST_FORTRAN
    t_fortran();
#endif
#ifndef NM_HOST_REF
    /* the calls on windows in device memory went through CUDA IPC; the mixed window's device
     * origin buffers with rank 0's host window, staged */
    tcase = "routes";
    int (*route_calls)(const char *, int, unsigned long long *) =
        (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    static const char *const ipc_fns[] = {"Put", "Get", "Accumulate", "Get_accumulate", "Fetch_and_op",
                                          "Compare_and_swap", "Rput", "Rget", "Raccumulate", "Rget_accumulate"};
    unsigned long long c = 0;
    for (int i = 0; route_calls && i < (int)(sizeof(ipc_fns) / sizeof(ipc_fns[0])); i++) {
        c = 0;
        route_calls(ipc_fns[i], 5 /* NCCLMPI_ROUTE_IPC */, &c);
        EQ(c > 0, 1, "MPI_%s calls on the IPC route: %llu", ipc_fns[i], c);
    }
    if (route_calls) { /* every rank accumulates into rank 0's host window in t_mixed */
        c = 0;
        route_calls("Accumulate", 2 /* NCCLMPI_ROUTE_STAGED */, &c);
        EQ(c > 0, 1, "MPI_Accumulate calls staged (device origin, host window): %llu", c);
    }
#endif
end:;
    int all = 0;
    long total = 0;
    tcase = "end";
    OK(MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, W));
    OK(MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, W));
    if (rank == 0) {
        if (all) fprintf(stderr, "rma_device: %d checks failed\n", all);
        else printf("rma_device: %ld checks passed\nrma_device: ok\n", total);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
