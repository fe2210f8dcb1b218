/* ncclmpi host-buffer MPI tests: the shared harness.
 *
 * Every program of test/mpi is built twice: plainly against MPI (test/mpi/foo: run with
 * LD_PRELOAD=libncclmpi.so, or with no ncclmpi at all) and relinked with -lncclmpi
 * (test/mpi/foo_linked). The same checks must pass in all three modes, which proves that host
 * buffers get the results, return codes and statuses of the real MPI.
 *
 * Command line (after the program name):
 *   --ncclmpi=require  ncclmpi must be interposed: ncclmpi_get_stats must be found and every
 *                      intercepted function the program called must have entered its wrapper
 *                      exactly once per call (calls counter), been routed to the host (no
 *                      NCCL, staged or error route) and resolve to libncclmpi.
 *   --ncclmpi=absent   ncclmpi must not be in the process (plain mode).
 *   --ncclmpi=any      (default) check the counters only when ncclmpi is present.
 *   -v                 rank 0 prints the per-function counters at the end.
 *   --slow-path=LIB    before each of the first TU_SLOW_PER_FN calls of every function, dlopen a
 *                      fresh copy of the empty shared object LIB (test/mpi/.libs/libnm_tail.so).
 *                      A new object at the end of the link map sends ncclmpi's next wrapper
 *                      call off its fast path (straight to PMPI) through nm_enter(), which
 *                      describes, classifies and routes the call (with NCCLMPI_AGREE and
 *                      envelopes, runs it itself from the description): these runs check that
 *                      path gives the same results.
 *
 * Conventions:
 *   CALL(Name, args...)  calls MPI_Name and notes the call for the counter check; value: rc.
 *   OK(Name, args...)    CALL + CHECK that it returned MPI_SUCCESS; value: 1 when it did.
 *   CHECK(cond[, fmt, ...])  records a failure with file:line and rank; never aborts.
 * Intercepted functions (src/interpose/mpi_api.def) are called through CALL/OK only;
 * test/mpi/coverage.sh checks that each of them is called by some program.
 * Outputs are poisoned (0xA5 bytes) before every call and compared with values computed here.
 */
#ifndef NCCLMPI_TEST_MPI_COMMON_H
#define NCCLMPI_TEST_MPI_COMMON_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ncclmpi.h"

#define TU_POISON_BYTE 0xA5
#define TU_GUARD 64 /* poisoned bytes behind every tu_alloc'ed buffer */
#define TU_MAXFN 128
#define TU_MAXPRINT 40
#define TU_SLOW_PER_FN 3

enum { TU_LIB_ANY, TU_LIB_REQUIRE, TU_LIB_ABSENT };

typedef int (*tu_get_stats_fn)(const char *, ncclmpi_stats_t *);

static struct {
    const char *prog;
    int rank, size;
    long checks, failures;
    int lib_mode, verbose, lookedup;
    tu_get_stats_fn get_stats;
    const char *slow_lib; /* --slow-path */
    char *slow_img;
    size_t slow_len;
    long slow_loads;
    int nfns;
    struct {
        const char *name;
        long noted;
        int known;
        ncclmpi_stats_t base;
    } fns[TU_MAXFN];
} tu = {"?", -1, 0, 0, 0, TU_LIB_ANY, 0, 0, NULL, NULL, NULL, 0, 0, 0, {{0}}};

/* ---- failures ---------------------------------------------------------------------------- */
__attribute__((format(printf, 4, 5))) static inline void tu_fail(const char *file, int line, const char *expr,
                                                                 const char *fmt, ...)
{
    tu.failures++;
    if (tu.failures > TU_MAXPRINT) {
        if (tu.failures == TU_MAXPRINT + 1)
            fprintf(stderr, "[%s %d/%d] too many failures, not printing more\n", tu.prog, tu.rank, tu.size);
        return;
    }
    char msg[512] = "";
    if (fmt && *fmt == ' ') fmt++; /* CHECK passes " " fmt */
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "[%s %d/%d] %s:%d: FAILED: %s%s%s\n", tu.prog, tu.rank, tu.size, file, line, expr,
            *msg ? ": " : "", msg);
    fflush(stderr);
}

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        tu.checks++;                                                                          \
        if (!(cond)) tu_fail(__FILE__, __LINE__, #cond, " " __VA_ARGS__);                      \
    } while (0)

static inline int tu_ok(const char *file, int line, const char *fn, int rc)
{
    tu.checks++;
    if (rc == MPI_SUCCESS) return 1;
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0, cls = -1;
    MPI_Error_string(rc, s, &len);
    MPI_Error_class(rc, &cls);
    tu_fail(file, line, fn, "returned %d (class %d): %s", rc, cls, s);
    return 0;
}

/* ---- the counter check (wrapper entered) -------------------------------------------------- */
static inline void tu_lookup(void)
{
    if (tu.lookedup) return;
    tu.lookedup = 1;
    tu.get_stats = (tu_get_stats_fn)dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
}
/* ncclmpi's counters of MPI_<fn> when ncclmpi is in the process (found with dlsym, so the
 * programs need not link it): 0, or -1 when it is absent or does not intercept fn. */
static inline int tu_stats(const char *fn, ncclmpi_stats_t *s)
{
    tu_lookup();
    return tu.get_stats ? tu.get_stats(fn, s) : -1;
}

/* --slow-path: write a fresh copy of the tail library and dlopen it (then unlink the file:
 * the mapping stays). Any failure is fatal: the run would not test what it claims to. */
static inline void tu_slow_tail(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/nm_tail.%d.%ld.so", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(),
             tu.slow_loads++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(tu.slow_img, 1, tu.slow_len, f) != tu.slow_len || fclose(f)) {
        fprintf(stderr, "%s: cannot write %s\n", tu.prog, path);
        exit(3);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!h) {
        fprintf(stderr, "%s: dlopen %s: %s\n", tu.prog, path, dlerror());
        exit(3);
    }
}
static inline void tu_slow_load_image(const char *lib)
{
    FILE *f = fopen(lib, "rb");
    long n = -1;
    if (f && !fseek(f, 0, SEEK_END)) n = ftell(f);
    if (n <= 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "%s: cannot read %s\n", tu.prog, lib);
        exit(3);
    }
    tu.slow_img = (char *)malloc(n);
    if (fread(tu.slow_img, 1, n, f) != (size_t)n) exit(3);
    fclose(f);
    tu.slow_len = n;
    tu.slow_lib = lib;
}

/* Record one call of MPI_<fn>; the first note takes the baseline of its counters. */
static inline void tu_note(const char *fn)
{
    tu_lookup();
    int i;
    for (i = 0; i < tu.nfns; i++)
        if (!strcmp(tu.fns[i].name, fn)) break;
    if (i == tu.nfns) {
        if (i == TU_MAXFN) abort();
        tu.fns[i].name = fn;
        tu.fns[i].noted = 0;
        memset(&tu.fns[i].base, 0, sizeof(tu.fns[i].base));
        tu.fns[i].known = tu.get_stats ? tu.get_stats(fn, &tu.fns[i].base) == 0 : 0;
        tu.nfns++;
    }
    tu.fns[i].noted++;
    if (tu.slow_lib && tu.fns[i].noted <= TU_SLOW_PER_FN) tu_slow_tail();
}

#define CALL(fn, ...) (tu_note(#fn), MPI_##fn(__VA_ARGS__))
#define OK(fn, ...) tu_ok(__FILE__, __LINE__, "MPI_" #fn, CALL(fn, __VA_ARGS__))

static inline const char *tu_object_of(const char *sym)
{
    void *p = dlsym(RTLD_DEFAULT, sym);
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname) return "(not found)";
    return info.dli_fname;
}

/* The route a host-buffer call of fn takes: the host's, but for the persistent collectives with
 * per-rank counts and the persistent neighbourhood collectives, which every rank runs as restarted nonblocking calls whatever its buffers
 * (route.h, nm_pers_coll_everywhere), counted on the staged route */
static inline int tu_host_route(const char *fn)
{
    static const char *const restarted[] = {"Gatherv_init", "Scatterv_init", "Alltoallv_init", "Alltoallw_init",
                                            "Neighbor_allgather_init", "Neighbor_allgatherv_init", "Neighbor_alltoall_init",
                                            "Neighbor_alltoallv_init", "Neighbor_alltoallw_init"};
    for (size_t i = 0; i < sizeof(restarted) / sizeof(restarted[0]); i++)
        if (!strcmp(fn, restarted[i])) return NCCLMPI_ROUTE_STAGED;
    return NCCLMPI_ROUTE_HOST;
}

static inline void tu_check_stats(void)
{
    tu_lookup();
    if (!tu.get_stats) {
        CHECK(tu.lib_mode != TU_LIB_REQUIRE, "ncclmpi_get_stats not found: the program was not interposed");
        for (int i = 0; i < tu.nfns; i++) {
            char sym[96];
            snprintf(sym, sizeof(sym), "MPI_%s", tu.fns[i].name);
            const char *obj = tu_object_of(sym);
            CHECK(!strstr(obj, "libncclmpi"), "%s resolves to %s without ncclmpi_get_stats", sym, obj);
        }
        return;
    }
    CHECK(tu.lib_mode != TU_LIB_ABSENT, "ncclmpi_get_stats found in plain mode (%s)",
          tu_object_of("ncclmpi_get_stats"));
    ncclmpi_stats_t none;
    CHECK(tu.get_stats("No_such_function", &none) == -1);
    if (tu.verbose && tu.rank == 0)
        fprintf(stderr, "[%s] %-22s %8s %8s %8s\n", tu.prog, "function", "noted", "calls", "host");
    for (int i = 0; i < tu.nfns; i++) {
        const char *fn = tu.fns[i].name;
        ncclmpi_stats_t now;
        if (!tu.fns[i].known || tu.get_stats(fn, &now) != 0) {
            CHECK(0, "MPI_%s is not intercepted by ncclmpi (ncclmpi_get_stats answers -1)", fn);
            continue;
        }
        const ncclmpi_stats_t *b = &tu.fns[i].base;
        const int hr = tu_host_route(fn);
        unsigned long long calls = now.calls - b->calls, host = now.route[hr] - b->route[hr];
        if (tu.verbose && tu.rank == 0)
            fprintf(stderr, "[%s] %-22s %8ld %8llu %8llu\n", tu.prog, fn, tu.fns[i].noted, calls, host);
        /* exactly once per call: not bypassed, not entered again from inside (a wrapper or the
         * MPI library calling MPI_<fn> rather than PMPI_<fn>), not counted twice */
        CHECK(calls == (unsigned long long)tu.fns[i].noted, "MPI_%s: wrapper entered %llu times, called %ld times",
              fn, calls, tu.fns[i].noted);
        CHECK(host == calls, "MPI_%s: %llu of %llu calls on the host-buffer route (%d)", fn, host, calls, hr);
        CHECK(now.fortran_calls == b->fortran_calls, "MPI_%s: Fortran entries from a C program", fn);
        for (int r = NCCLMPI_ROUTE_NCCL; r < NCCLMPI_ROUTE_COUNT; r++)
            CHECK(r == hr || now.route[r] == b->route[r], "MPI_%s: %llu host-buffer calls took route %d", fn,
                  now.route[r] - b->route[r], r);
        /* the routes outside ncclmpi_stats_t: none for host buffers; and the host count agrees */
        typedef int (*route_calls_fn)(const char *, int, unsigned long long *);
        route_calls_fn rc = (route_calls_fn)dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
        unsigned long long one = 1, hc = 0;
        CHECK(rc && rc(fn, NCCLMPI_ROUTE_ONESHOT, &one) == 0 && one == 0, "MPI_%s: %llu one-shot calls", fn, one);
        CHECK(rc && rc(fn, NCCLMPI_ROUTE_HOST, &hc) == 0 && hc == now.route[NCCLMPI_ROUTE_HOST],
              "MPI_%s: ncclmpi_get_route_calls says %llu host calls, ncclmpi_get_stats %llu", fn, hc,
              now.route[NCCLMPI_ROUTE_HOST]);
        char sym[96];
        snprintf(sym, sizeof(sym), "MPI_%s", fn);
        const char *obj = tu_object_of(sym);
        CHECK(strstr(obj, "libncclmpi") != NULL, "%s resolves to %s, not libncclmpi", sym, obj);
    }
}

/* ---- start and end ------------------------------------------------------------------------- */
static inline void tu_alarm(int sig)
{
    (void)sig;
    static const char m[] = "test/mpi: TIMEOUT (alarm): a rank is stuck\n";
    ssize_t w = write(2, m, sizeof(m) - 1);
    (void)w;
    _exit(124);
}

static inline const char *tu_basename(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* thread_level -1: MPI_Init(argc, argv); -2: MPI_Init(NULL, NULL); else
 * MPI_Init_thread(thread_level). Parses the arguments above.
 * MPI_COMM_WORLD gets MPI_ERRORS_RETURN, so a failing call is reported with file:line. */
static inline void tu_init(int *argc, char ***argv, int thread_level)
{
    tu.prog = tu_basename((*argv)[0]);
    for (int i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        if (!strcmp(a, "--ncclmpi=require")) tu.lib_mode = TU_LIB_REQUIRE;
        else if (!strcmp(a, "--ncclmpi=absent")) tu.lib_mode = TU_LIB_ABSENT;
        else if (!strcmp(a, "--ncclmpi=any")) tu.lib_mode = TU_LIB_ANY;
        else if (!strcmp(a, "-v")) tu.verbose = 1;
        else if (!strncmp(a, "--slow-path=", 12)) tu_slow_load_image(a + 12);
        else {
            fprintf(stderr, "%s: unknown argument %s\n", tu.prog, a);
            exit(2);
        }
    }
    signal(SIGALRM, tu_alarm);
    alarm(100);
    if (thread_level < 0) {
        if (!OK(Init, thread_level == -2 ? NULL : argc, thread_level == -2 ? NULL : argv)) exit(1);
    } else {
        int provided = -1;
        if (!OK(Init_thread, argc, argv, thread_level, &provided)) exit(1);
        CHECK(provided == MPI_THREAD_SINGLE || provided == MPI_THREAD_FUNNELED ||
              provided == MPI_THREAD_SERIALIZED || provided == MPI_THREAD_MULTIPLE, "provided=%d", provided);
        int q = -1;
        MPI_Query_thread(&q);
        CHECK(q == provided, "Query_thread %d, Init_thread provided %d", q, provided);
    }
    int flag = 0;
    MPI_Initialized(&flag);
    CHECK(flag);
    MPI_Comm_rank(MPI_COMM_WORLD, &tu.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &tu.size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* For programs that run their own checks under MPI_THREAD_MULTIPLE (p2p_threads, p2p_probe_race):
 * MPI_Init_thread, this rank and the size of MPI_COMM_WORLD; 0 (after MPI_Finalize, rank 0 said
 * why: the program exits 77, skipped) when the MPI provides less or there are fewer than
 * min_size ranks */
static inline int tu_init_multiple(int *argc, char ***argv, int min_size, int *rank, int *size)
{
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    if (provided == MPI_THREAD_MULTIPLE && *size >= min_size) return 1;
    if (*rank == 0)
        printf("%s: skipped (needs MPI_THREAD_MULTIPLE and %d ranks)\n", tu_basename((*argv)[0]), min_size);
    MPI_Finalize();
    return 0;
}

/* This rank, the size of MPI_COMM_WORLD and the ring neighbours (next or prev may be NULL), after
 * tu_init */
static inline void tu_ring(int *r, int *p, int *next, int *prev)
{
    *r = tu.rank;
    *p = tu.size;
    if (next) *next = (tu.rank + 1) % tu.size;
    if (prev) *prev = (tu.rank + tu.size - 1) % tu.size;
}

/* MPI_Finalize, then the counter check. Returns the exit status of the program. */
static inline int tu_finalize(void)
{
    OK(Finalize);
    int flag = 0;
    MPI_Finalized(&flag);
    CHECK(flag);
    tu_check_stats();
    if (tu.failures)
        fprintf(stderr, "[%s %d/%d] FAIL: %ld of %ld checks failed\n", tu.prog, tu.rank, tu.size, tu.failures,
                tu.checks);
    else if (tu.rank == 0)
        printf("[%s] PASS: %ld checks on rank 0 (np=%d, ncclmpi %s%s)\n", tu.prog, tu.checks, tu.size,
               tu.get_stats ? "interposed" : "absent", tu.slow_lib ? ", calls sent off the fast path" : "");
    fflush(stdout);
    return tu.failures ? 1 : 0;
}

/* ---- buffers ------------------------------------------------------------------------------- */
/* bytes + TU_GUARD poisoned bytes; tu_guard_ok() checks that nothing was written behind. */
static inline void *tu_alloc(size_t bytes)
{
    unsigned char *p = (unsigned char *)malloc(16 + bytes + TU_GUARD);
    if (!p) abort();
    memcpy(p, &bytes, sizeof(bytes));
    memset(p + 16, TU_POISON_BYTE, bytes + TU_GUARD);
    return p + 16;
}
static inline size_t tu_size_of(void *p)
{
    size_t n;
    memcpy(&n, (unsigned char *)p - 16, sizeof(n));
    return n;
}
static inline void tu_free(void *p)
{
    if (p) free((unsigned char *)p - 16);
}
static inline void tu_poison(void *p, size_t bytes) { memset(p, TU_POISON_BYTE, bytes); }
/* poison the whole tu_alloc'ed buffer, guard included */
static inline void tu_repoison(void *p) { memset(p, TU_POISON_BYTE, tu_size_of(p) + TU_GUARD); }
static inline int tu_is_poison(const void *p, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != TU_POISON_BYTE) return 0;
    return 1;
}
static inline int tu_guard_ok(void *p) { return tu_is_poison((unsigned char *)p + tu_size_of(p), TU_GUARD); }
#define CHECK_GUARD(p) CHECK(tu_guard_ok(p), "written past the end of %s", #p)
#define CHECK_POISON(p, bytes, ...) CHECK(tu_is_poison((p), (bytes)), __VA_ARGS__)

static inline int tu_int_poison(void)
{
    int v;
    memset(&v, TU_POISON_BYTE, sizeof(v));
    return v;
}

/* Compare arrays; report the first few differences. what: printf format of the context. */
#define TU_CMP_FN(NAME, T, FMT)                                                               \
    __attribute__((format(printf, 6, 7))) static inline int NAME(const char *file, int line, const T *got,        \
                                                                const T *exp, long n, const char *what, ...) \
    {                                                                                         \
        long bad = 0;                                                                         \
        char ctx[256];                                                                        \
        va_list ap;                                                                           \
        tu.checks++;                                                                          \
        for (long i = 0; i < n; i++) {                                                        \
            if (got[i] == exp[i]) continue;                                                   \
            if (bad++ < 3) {                                                                  \
                va_start(ap, what);                                                           \
                vsnprintf(ctx, sizeof(ctx), what, ap);                                        \
                va_end(ap);                                                                   \
                char m[400];                                                                  \
                snprintf(m, sizeof(m), "%s [%ld]: got " FMT ", expected " FMT, ctx, i, got[i], exp[i]); \
                tu_fail(file, line, "values", "%s", m);                                       \
            }                                                                                 \
        }                                                                                     \
        if (bad > 3) {                                                                        \
            va_start(ap, what);                                                               \
            vsnprintf(ctx, sizeof(ctx), what, ap);                                            \
            va_end(ap);                                                                       \
            tu_fail(file, line, "values", "%s: %ld of %ld elements differ", ctx, bad, n);      \
        }                                                                                     \
        return bad == 0;                                                                      \
    }
TU_CMP_FN(tu_cmp_i, int, "%d")
TU_CMP_FN(tu_cmp_ll, long long, "%lld")
TU_CMP_FN(tu_cmp_d, double, "%.17g")
TU_CMP_FN(tu_cmp_f, float, "%.9g")
TU_CMP_FN(tu_cmp_s, short, "%hd")
TU_CMP_FN(tu_cmp_uc, unsigned char, "%u")
#define CHECK_I(got, exp, n, ...) tu_cmp_i(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)
#define CHECK_LL(got, exp, n, ...) tu_cmp_ll(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)
#define CHECK_D(got, exp, n, ...) tu_cmp_d(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)
#define CHECK_F(got, exp, n, ...) tu_cmp_f(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)
#define CHECK_S(got, exp, n, ...) tu_cmp_s(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)
#define CHECK_UC(got, exp, n, ...) tu_cmp_uc(__FILE__, __LINE__, (got), (exp), (n), __VA_ARGS__)

/* ---- values: never zero, exact in float64 ----------------------------------------------- */
static inline int ival(int r, long i) { return (r + 1) * 1000 + (int)(i % 100000) * 7 + 3; }
static inline double dval(int r, long i) { return (r + 1) * 0.5 + (double)(i % 1000) * 0.25 + 0.125; }
/* element i of the block that rank src sends to rank dst */
static inline int aval(int src, int dst, long i) { return src * 10000000 + dst * 100000 + (int)(i % 100000) + 1; }

/* ---- typed layouts ---------------------------------------------------------------------- */
/* A layout: `ipe` data ints per element, `ext` ints between elements; data int j of an
 * element sits at mt_pos(). Values are carried as ints (a double is two of them), so one
 * expected-image builder serves every type. T_VEC: 3 blocks of 2 ints, stride 4, resized to
 * an extent of 12 ints: data at 0 1 4 5 8 9 of each 12, the rest are gaps that a receive
 * must leave alone. */
typedef struct {
    const char *name;
    MPI_Datatype type;
    int ipe, ext;
} mtype_t;
static MPI_Datatype T_CT3 __attribute__((unused)), T_VEC __attribute__((unused));
static mtype_t M_INT __attribute__((unused)), M_DBL __attribute__((unused)), M_CT3 __attribute__((unused)),
    M_VEC __attribute__((unused));
static inline void tu_types_create(void)
{
    MPI_Datatype v;
    MPI_Type_contiguous(3, MPI_INT, &T_CT3);
    MPI_Type_vector(3, 2, 4, MPI_INT, &v);
    MPI_Type_create_resized(v, 0, 12 * sizeof(int), &T_VEC);
    MPI_Type_free(&v);
    MPI_Type_commit(&T_CT3);
    MPI_Type_commit(&T_VEC);
    M_INT = (mtype_t){"int", MPI_INT, 1, 1};
    M_DBL = (mtype_t){"double", MPI_DOUBLE, 2, 2};
    M_CT3 = (mtype_t){"contiguous(3 int)", T_CT3, 3, 3};
    M_VEC = (mtype_t){"vector(3x2 int, stride 4, extent 12)", T_VEC, 6, 12};
}
static inline void tu_types_free(void)
{
    MPI_Type_free(&T_CT3);
    MPI_Type_free(&T_VEC);
}
static inline long mt_pos(const mtype_t *m, long k)
{
    long e = k / m->ipe, j = k % m->ipe;
    if (m->ext == 12) return e * 12 + (j / 2) * 4 + j % 2; /* the vector */
    return e * m->ext + j;
}
static inline size_t mt_bytes(const mtype_t *m, long count) { return (size_t)count * m->ext * sizeof(int); }
/* write count elements of layout m at base: flat data int k = aval(src, dst, k) */
static inline void mt_place(const mtype_t *m, int *base, long count, int src, int dst)
{
    for (long k = 0; k < count * m->ipe; k++) base[mt_pos(m, k)] = aval(src, dst, k);
}

/* A receive buffer and its expected image, both poisoned. */
typedef struct {
    int *buf, *img;
    long nints;
} rimg_t;
static inline rimg_t rimg_new(long nints)
{
    rimg_t x = {(int *)tu_alloc(nints * sizeof(int)), (int *)tu_alloc(nints * sizeof(int)), nints};
    return x;
}
#define CHECK_RIMG(x, ...)                                                                    \
    do {                                                                                      \
        CHECK_I((x).buf, (x).img, (x).nints, __VA_ARGS__);                                    \
        CHECK_GUARD((x).buf);                                                                 \
    } while (0)
static inline void rimg_free(rimg_t *x)
{
    tu_free(x->buf);
    tu_free(x->img);
}

/* ---- statuses ------------------------------------------------------------------------------ */
static inline void tu_poison_status(MPI_Status *s)
{
    memset(s, TU_POISON_BYTE, sizeof(*s));
}
/* source, tag and element count of a status */
#define CHECK_STATUS(st, src, tg, dtype, cnt)                                                 \
    do {                                                                                      \
        int c_ = -1;                                                                          \
        MPI_Get_count(&(st), (dtype), &c_);                                                   \
        CHECK((st).MPI_SOURCE == (src) && (st).MPI_TAG == (tg) && c_ == (cnt),                \
              "status: source %d tag %d count %d, expected %d %d %d", (st).MPI_SOURCE, (st).MPI_TAG, c_, \
              (int)(src), (int)(tg), (int)(cnt));                                             \
    } while (0)
/* the empty status of MPI-3.1 3.7.3 (null or inactive request, MPI_PROC_NULL) */
#define CHECK_EMPTY_STATUS(st, src)                                                           \
    do {                                                                                      \
        int c_ = -1, canc_ = -1;                                                              \
        MPI_Get_count(&(st), MPI_BYTE, &c_);                                                  \
        MPI_Test_cancelled(&(st), &canc_);                                                    \
        CHECK((st).MPI_SOURCE == (src) && (st).MPI_TAG == MPI_ANY_TAG && c_ == 0 && !canc_,   \
              "empty status: source %d tag %d count %d cancelled %d", (st).MPI_SOURCE, (st).MPI_TAG, c_, canc_); \
    } while (0)

static inline double tu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static inline void tu_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Message buffers of the programs that are also built for device memory (-DNM_GPU_TEST:
 * test/gpu/gpu_probe_race, gpu_blocked_thread): host memory here, device memory there. */
#ifdef NM_GPU_TEST
#include <cuda_runtime.h>
static inline void *tu_buf_new(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static inline void tu_buf_put(void *dst, const int *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice); }
static inline void tu_buf_get(int *dst, const void *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost); }
static inline void tu_buf_free(void *p) { cudaFree(p); }
#else
static inline void *tu_buf_new(size_t n) { return malloc(n); }
static inline void tu_buf_put(void *dst, const int *src, size_t n) { memcpy(dst, src, n); }
static inline void tu_buf_get(int *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static inline void tu_buf_free(void *p) { free(p); }
#endif

/* The GPU build: this rank's GPU (by its rank on the node); 0 with a message when there is none
 * (the caller finalizes and skips). The host build: 1. */
static inline int tu_buf_device(const char *prog, int rank)
{
#ifdef NM_GPU_TEST
    int ndev = 0, lrank = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (rank == 0) printf("%s: skipped (no GPU)\n", prog);
        return 0;
    }
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_free(&node);
    cudaSetDevice(lrank % ndev);
#else
    (void)prog;
    (void)rank;
#endif
    return 1;
}

#endif
