/* stage_profile: an NVTX injection library that sums host time per named range, for the stages
 * ncclmpi marks under NCCLMPI_NVTX=2 (src/core/nvtx.h: nm:classify, nm:queue, ...). NVTX3 loads it
 * from NVTX_INJECTION64_PATH at the first NVTX call, as it loads a profiler.
 *
 * Per name: the ranges closed, their inclusive time, and their self time (inclusive less the
 * ranges nested in them). Each push and pop reads CLOCK_MONOTONIC, which costs time of its own;
 * two costs are measured at load: probe_ns, what one empty range adds to the range holding it,
 * and inner_ns, what an empty range measures itself. A range's true self time is then
 *   self_ns - inner_ns - children x (probe_ns - inner_ns)          (per range)
 * which stage_profile_true_self() computes.
 *
 * A program reads the sums with stage_profile_snapshot(), found with
 *   dlsym(dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD), "stage_profile_snapshot")
 * (bench/device_overhead --stages does, before and after its timed loop). With
 * STAGE_PROFILE_REPORT=1 the totals are printed to stderr at exit.
 *
 * One thread at a time keeps exact sums; ranges of several threads are summed with atomic adds. */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stage_profile.h"

enum { MAX_DEPTH = 64 };

struct frame {
    int id;             /* row, or -1 when the table was full */
    long long t0;       /* push time */
    long long child_ns; /* inclusive time of the ranges closed inside it */
    long long children; /* ranges closed inside it (direct) */
};

static struct stage_profile_row rows[STAGE_PROFILE_MAX_ROWS];
static int nrows;                           /* rows used (grows under name_lock) */
static int name_lock;                       /* a spin lock for adding a row */
static double probe_ns;                     /* one empty range's cost, as its parent sees it */
static double inner_ns;                     /* an empty range's own measured time */
static __thread struct frame stack[MAX_DEPTH];
static __thread int depth;
static __thread int overflow; /* pushes beyond MAX_DEPTH (their pops are dropped) */

static inline long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* the row of a name: by address first (ncclmpi passes the same constants), then by text */
static int row_of(const char *name)
{
    int n = __atomic_load_n(&nrows, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (rows[i].key == name) return i;
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) return i;
    while (__atomic_exchange_n(&name_lock, 1, __ATOMIC_ACQUIRE)) {
    }
    int id = -1;
    n = nrows;
    for (int i = 0; i < n && id < 0; i++)
        if (!strcmp(rows[i].name, name)) id = i;
    if (id < 0 && n < STAGE_PROFILE_MAX_ROWS) {
        id = n;
        rows[id].key = name;
        snprintf(rows[id].name, sizeof(rows[id].name), "%s", name);
        __atomic_store_n(&nrows, n + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&name_lock, 0, __ATOMIC_RELEASE);
    return id;
}

static int NVTX_API sp_push(const char *name)
{
    if (depth >= MAX_DEPTH) {
        overflow++;
        return depth;
    }
    struct frame *f = &stack[depth++];
    f->id = row_of(name ? name : "(null)");
    f->child_ns = 0;
    f->children = 0;
    f->t0 = now_ns();
    return depth - 1;
}

static int NVTX_API sp_pop(void)
{
    long long t1 = now_ns();
    if (overflow) {
        overflow--;
        return depth;
    }
    if (depth == 0) return -1;
    struct frame *f = &stack[--depth];
    long long incl = t1 - f->t0;
    if (f->id >= 0) {
        struct stage_profile_row *r = &rows[f->id];
        __atomic_add_fetch(&r->count, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->incl_ns, incl, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->self_ns, incl - f->child_ns, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->children, f->children, __ATOMIC_RELAXED);
    }
    if (depth > 0) {
        stack[depth - 1].child_ns += incl;
        stack[depth - 1].children++;
    }
    return depth;
}

__attribute__((visibility("default"))) int stage_profile_snapshot(struct stage_profile_row *out, int max, double *probe)
{
    int n = __atomic_load_n(&nrows, __ATOMIC_ACQUIRE);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) {
        out[i] = rows[i];
        out[i].count = __atomic_load_n(&rows[i].count, __ATOMIC_RELAXED);
        out[i].incl_ns = __atomic_load_n(&rows[i].incl_ns, __ATOMIC_RELAXED);
        out[i].self_ns = __atomic_load_n(&rows[i].self_ns, __ATOMIC_RELAXED);
        out[i].children = __atomic_load_n(&rows[i].children, __ATOMIC_RELAXED);
    }
    if (probe) {
        probe[0] = probe_ns;
        probe[1] = inner_ns;
    }
    return n;
}

/* the cost one empty range adds to its parent's time: a parent frame holding K empty children,
 * less the same parent empty, over K; and an empty range's own measured time (the minimum of
 * several tries, each warmed by the one before) */
static void calibrate(void)
{
    enum { K = 2000, TRIES = 9 };
    static const char parent[] = "stage_profile:calibrate", child[] = "stage_profile:probe";
    double best = 1e30, inner = 1e30;
    for (int t = 0; t < TRIES; t++) {
        int ci = row_of(child);
        long long i0 = rows[ci].incl_ns, c0 = rows[ci].count;
        long long a = now_ns();
        sp_push(parent);
        for (int k = 0; k < K; k++) {
            sp_push(child);
            sp_pop();
        }
        sp_pop();
        long long b = now_ns();
        sp_push(parent);
        sp_pop();
        long long c = now_ns();
        double per = ((double)(b - a) - (double)(c - b)) / K;
        double own = (double)(rows[ci].incl_ns - i0) / (double)(rows[ci].count - c0);
        if (per < best) best = per;
        if (own < inner) inner = own;
    }
    probe_ns = best > 0 ? best : 0;
    inner_ns = inner > 0 && inner < probe_ns ? inner : 0;
    /* the calibration's rows are left out of the sums */
    for (int i = 0; i < nrows; i++)
        if (!strncmp(rows[i].name, "stage_profile:", 14)) rows[i].count = rows[i].incl_ns = rows[i].self_ns = rows[i].children = 0;
}

static void report(void)
{
    fprintf(stderr, "stage_profile: probe %.1f ns per range (%.1f inside it)\n%-24s %10s %14s %14s\n", probe_ns, inner_ns, "range",
            "count", "incl ns/range", "self ns/range");
    for (int i = 0; i < nrows; i++) {
        const struct stage_profile_row *r = &rows[i];
        if (!r->count) continue;
        fprintf(stderr, "%-24s %10lld %14.1f %14.1f\n", r->name, r->count, (double)r->incl_ns / r->count,
                ((double)r->self_ns - r->count * inner_ns - r->children * (probe_ns - inner_ns)) / r->count);
    }
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || size <= NVTX_CBID_CORE_RangePop) return 0;
    calibrate();
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)sp_push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)sp_pop;
    const char *rep = getenv("STAGE_PROFILE_REPORT");
    if (rep && *rep && strcmp(rep, "0")) atexit(report);
    return 1;
}
