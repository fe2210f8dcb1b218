/* ncclmpi: counters and their report. */
#include "nm_build.h"
#include "util/stats.h"
#include "util/log.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include <unistd.h>

nm_stats_t nm_stats;

const char *const nm_fn_names[NM_FN_COUNT] = {
#define NM_FN_NAME(name, path, kind, flags) #name,
    NM_FN_TABLE(NM_FN_NAME)
#undef NM_FN_NAME
};

int nm_fn_lookup(const char *name)
{
    if (!name) return -1;
    if (!strncmp(name, "MPI_", 4)) name += 4;
    for (int i = 0; i < NM_FN_COUNT; i++)
        if (!strcmp(nm_fn_names[i], name)) return i;
    return -1;
}

/* Everything not routed elsewhere went to the real MPI: fast-path calls are not counted per
 * route, so host = entries - other routes (Fortran calls that took the C path are counted once,
 * as C calls). */
static uint64_t host_calls(int fn, uint64_t calls, uint64_t fcalls)
{
    uint64_t routed = 0;
    for (int r = NCCLMPI_ROUTE_NCCL; r < NM_ROUTES; r++) routed += __atomic_load_n(&nm_stats.route[fn][r], __ATOMIC_RELAXED);
    uint64_t entries = calls + fcalls - __atomic_load_n(&nm_stats.fcalls_c[fn], __ATOMIC_RELAXED);
    return entries >= routed ? entries - routed : 0;
}

__attribute__((visibility("default"))) int ncclmpi_get_stats(const char *mpi_function, ncclmpi_stats_t *s)
{
    int fn = nm_fn_lookup(mpi_function);
    if (fn < 0 || !s) return -1;
    memset(s, 0, sizeof(*s));
    s->calls = __atomic_load_n(&nm_stats.calls[fn], __ATOMIC_RELAXED);
    s->fortran_calls = __atomic_load_n(&nm_stats.fcalls[fn], __ATOMIC_RELAXED);
    for (int r = NCCLMPI_ROUTE_NCCL; r < NCCLMPI_ROUTE_COUNT; r++)
        s->route[r] = __atomic_load_n(&nm_stats.route[fn][r], __ATOMIC_RELAXED);
    s->route[NCCLMPI_ROUTE_HOST] = host_calls(fn, s->calls, s->fortran_calls);
    return 0;
}

__attribute__((visibility("default"))) int ncclmpi_get_route_calls(const char *mpi_function, int route,
                                                                    unsigned long long *calls)
{
    int fn = nm_fn_lookup(mpi_function);
    if (fn < 0 || route < 0 || route >= NM_ROUTES || !calls) return -1;
    if (route == NCCLMPI_ROUTE_HOST)
        *calls = host_calls(fn, __atomic_load_n(&nm_stats.calls[fn], __ATOMIC_RELAXED),
                            __atomic_load_n(&nm_stats.fcalls[fn], __ATOMIC_RELAXED));
    else
        *calls = __atomic_load_n(&nm_stats.route[fn][route], __ATOMIC_RELAXED);
    return 0;
}

/* ---- reports ------------------------------------------------------------------------------ */

/* Columns of a table row: calls, fortran calls, then the routes. */
enum { C_CALLS, C_FORTRAN, C_HOST, C_NCCL, C_ONESHOT, C_IPC, C_STAGED, C_ERROR, NCOLS };
static const char *const col_names[NCOLS] = {"calls", "fortran", "host", "nccl", "oneshot", "ipc", "staged", "error"};
/* row NM_FN_COUNT: all functions; the last two rows are not functions', each printed as a line of
 * its own from its first two columns: ROW_SIDES the device sides made and taken over, ROW_FUSED
 * the operations fused and the NCCL calls they shared */
#define NROWS (NM_FN_COUNT + 3)
#define ROW_SIDES (NM_FN_COUNT + 1)
#define ROW_FUSED (NM_FN_COUNT + 2)

static void local_counts(unsigned long long v[NROWS][NCOLS])
{
    memset(v, 0, sizeof(unsigned long long) * NROWS * NCOLS);
    for (int i = 0; i < NM_FN_COUNT; i++) {
        ncclmpi_stats_t s;
        ncclmpi_get_stats(nm_fn_names[i], &s);
        v[i][C_CALLS] = s.calls;
        v[i][C_FORTRAN] = s.fortran_calls;
        v[i][C_HOST] = s.route[NCCLMPI_ROUTE_HOST];
        v[i][C_NCCL] = s.route[NCCLMPI_ROUTE_NCCL];
        v[i][C_ONESHOT] = __atomic_load_n(&nm_stats.route[i][NCCLMPI_ROUTE_ONESHOT], __ATOMIC_RELAXED);
        v[i][C_IPC] = __atomic_load_n(&nm_stats.route[i][NCCLMPI_ROUTE_IPC], __ATOMIC_RELAXED);
        v[i][C_STAGED] = s.route[NCCLMPI_ROUTE_STAGED];
        v[i][C_ERROR] = s.route[NCCLMPI_ROUTE_ERROR];
        for (int c = 0; c < NCOLS; c++) v[NM_FN_COUNT][c] += v[i][c];
    }
    v[ROW_SIDES][0] = __atomic_load_n(&nm_stats.sides_made, __ATOMIC_RELAXED);
    v[ROW_SIDES][1] = __atomic_load_n(&nm_stats.sides_reused, __ATOMIC_RELAXED);
    for (int i = 0; i < NM_FN_COUNT; i++) v[ROW_FUSED][0] += __atomic_load_n(&nm_stats.route[i][NCCLMPI_ROUTE_FUSED], __ATOMIC_RELAXED);
    v[ROW_FUSED][1] = __atomic_load_n(&nm_stats.fused_calls, __ATOMIC_RELAXED);
}

/* the sides line, where there were any: made, taken over (and each as one rank's [min-max]) */
static void write_sides(FILE *m, const char *prefix, const char *made, const char *reused)
{
    fprintf(m, "%sdevice communicators (NCCL, or shared-GPU windows): %s made, %s taken over from freed ones "
            "(NCCLMPI_COMM_CACHE)\n", prefix, made, reused);
}

/* the fused line, where any were: operations, the NCCL calls they shared */
static void write_fused(FILE *m, const char *prefix, const char *ops, const char *calls)
{
    fprintf(m, "%sallreduces fused: %s operations in %s NCCL calls (NCCLMPI_FUSE)\n", prefix, ops, calls);
}

static const char *row_name(int i) { return i < NM_FN_COUNT ? nm_fn_names[i] : "(all functions)"; }

/* A function's row is printed when it counted anything: its calls, or routes ncclmpi took for it
 * without a call of it (the starts of a persistent request restarted as MPI_Isend/MPI_Irecv) */
static int row_used(const unsigned long long *row)
{
    for (int c = 0; c < NCOLS; c++)
        if (row[c]) return 1;
    return 0;
}

/* Text written to f in one piece (one write, so ranks' tables do not interleave): build it in
 * memory, or straight to f when that cannot be had. */
typedef struct {
    FILE *f, *m;
    char *buf;
    size_t len;
} whole_t;

static FILE *whole_open(whole_t *w, FILE *f)
{
    w->f = f;
    w->buf = NULL;
    w->len = 0;
    w->m = open_memstream(&w->buf, &w->len);
    if (!w->m) w->m = f;
    return w->m;
}

static void whole_close(whole_t *w)
{
    if (w->m == w->f) return;
    fclose(w->m);
    if (w->buf) fwrite(w->buf, 1, w->len, w->f);
    fflush(w->f);
    free(w->buf);
}

/* One rank's table, each line starting with `prefix`, written to f in one piece. */
static void write_rank_table(FILE *f, const char *prefix, const unsigned long long v[NROWS][NCOLS])
{
    whole_t w;
    FILE *m = whole_open(&w, f);
    fprintf(m, "%s%-22s", prefix, "function");
    for (int c = 0; c < NCOLS; c++) fprintf(m, " %10s", col_names[c]);
    fputc('\n', m);
    for (int i = 0; i < ROW_SIDES; i++) {
        if (!row_used(v[i])) continue;
        fprintf(m, "%s%-22s", prefix, row_name(i));
        for (int c = 0; c < NCOLS; c++) fprintf(m, " %10llu", v[i][c]);
        fputc('\n', m);
    }
    if (v[ROW_SIDES][0] || v[ROW_SIDES][1]) {
        char made[24], reused[24];
        snprintf(made, sizeof(made), "%llu", v[ROW_SIDES][0]);
        snprintf(reused, sizeof(reused), "%llu", v[ROW_SIDES][1]);
        write_sides(m, prefix, made, reused);
    }
    if (v[ROW_FUSED][0]) {
        char ops[24], calls[24];
        snprintf(ops, sizeof(ops), "%llu", v[ROW_FUSED][0]);
        snprintf(calls, sizeof(calls), "%llu", v[ROW_FUSED][1]);
        write_fused(m, prefix, ops, calls);
    }
    whole_close(&w);
}

__attribute__((visibility("default"))) void ncclmpi_print_stats(void)
{
    static unsigned long long v[NROWS][NCOLS];
    char prefix[48];
    int r = nm_log_rank();
    if (r >= 0) snprintf(prefix, sizeof(prefix), "[ncclmpi r%d] ", r);
    else snprintf(prefix, sizeof(prefix), "[ncclmpi] ");
    local_counts(v);
    write_rank_table(stderr, prefix, v);
}

/* NCCLMPI_STATS=file:PATH: %r -> rank; without %r and with several ranks, PATH.RANK. */
static void stats_path(char *out, size_t n, const char *pattern, int rank, int size)
{
    size_t o = 0;
    int had = 0;
    for (const char *p = pattern; *p && o + 1 < n; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out + o, n - o, "%d", rank);
            if (o >= n) o = n - 1;
            p++;
            had = 1;
        } else
            out[o++] = *p;
    }
    out[o] = 0;
    if (!had && size > 1 && o + 1 < n) snprintf(out + o, n - o, ".%d", rank);
}

/* Rank 0: sum over the ranks, and the least and most one rank counted, per function and column. */
static void write_summary(FILE *f, int size, const unsigned long long sum[NROWS][NCOLS],
                          const unsigned long long mn[NROWS][NCOLS], const unsigned long long mx[NROWS][NCOLS])
{
    static char cell[NROWS][NCOLS][64];
    int width[NCOLS];
    for (int c = 0; c < NCOLS; c++) width[c] = (int)strlen(col_names[c]);
    for (int i = 0; i < NROWS; i++)
        for (int c = 0; c < NCOLS; c++) {
            if (mn[i][c] == mx[i][c]) snprintf(cell[i][c], sizeof(cell[i][c]), "%llu", sum[i][c]);
            else snprintf(cell[i][c], sizeof(cell[i][c]), "%llu [%llu-%llu]", sum[i][c], mn[i][c], mx[i][c]);
            if (i >= ROW_SIDES || !row_used(sum[i])) continue;
            int w = (int)strlen(cell[i][c]);
            if (w > width[c]) width[c] = w;
        }
    whole_t w;
    FILE *m = whole_open(&w, f);
    fprintf(m, "[ncclmpi] route counts at MPI_Finalize, summed over %d rank%s ([min-max] per rank where they differ)\n",
            size, size == 1 ? "" : "s");
    fprintf(m, "[ncclmpi] %-22s", "function");
    for (int c = 0; c < NCOLS; c++) fprintf(m, "  %*s", width[c], col_names[c]);
    fputc('\n', m);
    for (int i = 0; i < ROW_SIDES; i++) {
        if (!row_used(sum[i])) continue;
        fprintf(m, "[ncclmpi] %-22s", row_name(i));
        for (int c = 0; c < NCOLS; c++) fprintf(m, "  %*s", width[c], cell[i][c]);
        fputc('\n', m);
    }
    if (sum[ROW_SIDES][0] || sum[ROW_SIDES][1]) write_sides(m, "[ncclmpi] ", cell[ROW_SIDES][0], cell[ROW_SIDES][1]);
    if (sum[ROW_FUSED][0]) write_fused(m, "[ncclmpi] ", cell[ROW_FUSED][0], cell[ROW_FUSED][1]);
    whole_close(&w);
}

void nm_stats_finalize(void)
{
    static unsigned long long v[NROWS][NCOLS], sum[NROWS][NCOLS], mn[NROWS][NCOLS], mx[NROWS][NCOLS];
    int rank = nm_log_rank(), size = 1, inited = 0, finalized = 1;
    PMPI_Initialized(&inited);
    PMPI_Finalized(&finalized);
    const int mpi = inited && !finalized;
    if (mpi) {
        PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
        PMPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    switch (nm_cfg.STATS) {
    case NM_STATS_OFF: return;
    case NM_STATS_RANK: ncclmpi_print_stats(); return;
    case NM_STATS_FILE: {
        char path[4096];
        stats_path(path, sizeof(path), nm_cfg.stats_file ? nm_cfg.stats_file : "ncclmpi_stats.%r", rank < 0 ? 0 : rank,
                   size);
        FILE *f = fopen(path, "w");
        if (!f) {
            NM_WARN(CONFIG, "NCCLMPI_STATS=file:%s: cannot write %s (%s)", nm_cfg.stats_file, path, strerror(errno));
            return;
        }
        local_counts(v);
        fprintf(f, "# ncclmpi %s route counts at MPI_Finalize: rank %d of %d, pid %ld\n", PACKAGE_VERSION, rank, size,
                (long)getpid());
        write_rank_table(f, "", v);
        fclose(f);
        return;
    }
    default: break;
    }
    /* summary: every rank takes part in three reductions to rank 0 of MPI_COMM_WORLD */
    local_counts(v);
    if (!mpi) {
        write_summary(stderr, 1, v, v, v);
        return;
    }
    const int n = NROWS * NCOLS;
    PMPI_Reduce(v, sum, n, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    PMPI_Reduce(v, mn, n, MPI_UNSIGNED_LONG_LONG, MPI_MIN, 0, MPI_COMM_WORLD);
    PMPI_Reduce(v, mx, n, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) write_summary(stderr, size, sum, mn, mx);
}
