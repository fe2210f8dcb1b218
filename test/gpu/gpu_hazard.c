/* gpu_hazard: adversarial scenarios for a CUDA-aware MPI, one per run:
 *
 *     gpu_hazard [--host] <scenario> [args]
 *
 * Every scenario is a legal MPI program (fault, kill and fuzz make deliberate errors) that a
 * correct CUDA-aware MPI runs without hanging and with correct results: unusual datatype layouts
 * on device buffers, empty contributions with NULL buffers as the first device call of a
 * communicator, MPI_BOTTOM and negative lower bounds, signatures that match with different
 * types, byte reductions that wrap, mixed host/device buffers, threads entering communicators in
 * opposite orders, nonblocking collectives crossing point-to-point, coalesced and explicit groups
 * of every collective kind (MAX and MIN reductions together among them), communicator churn (also with
 * device collectives on every new communicator, one left in flight across MPI_Comm_free, from two
 * threads at once), progress
 * of host messages while a device collective waits, a device reset (cudaDeviceReset) before
 * MPI_Finalize and before more device calls, injected faults, a killed rank and bad arguments. Results are checked against values computed on the host; receive buffers are
 * poisoned (0xAB) with 256-byte guard zones on both sides, and every byte MPI must not write has
 * to keep the poison.
 *
 * --host makes every "device" buffer plain malloc memory, so the same logic runs (and is
 * validated) under a plain MPI on a machine without a GPU. Without --host and without a GPU the
 * program exits 77 (skipped). Prints "gpu_hazard <scenario>: OK" and exits 0 when all passed. */
#define _GNU_SOURCE
#include "gpu_common.h"
#include <cuda.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static int rank, size, failures, host_mode, g_dev, g_distinct; /* g_distinct: every rank has a GPU of its own */
static const char *scen = "?";

/* one line per failure, written at once so that ranks' lines do not interleave */
static void check_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    int k = snprintf(msg, sizeof(msg), "gpu_hazard %s: [rank %d] FAIL %s:%d: ", scen, rank, file, line);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && k < (int)sizeof(msg)) vsnprintf(msg + k, sizeof(msg) - k, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}
#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond)) check_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* Progress marks for hangs: STEP() before each communication call records where the rank is;
 * a watchdog thread reports, once per stall, a rank that has not passed a new mark for
 * GPU_HAZARD_WATCHDOG seconds (default 20; 0: off). It only prints: the test's time limit ends
 * the run. */
static volatile const char *g_step_func = "start";
static volatile int g_step_line;
static volatile unsigned long g_steps;
#define STEP() (g_step_func = __func__, g_step_line = __LINE__, __atomic_add_fetch(&g_steps, 1, __ATOMIC_RELAXED))

static void *watchdog_main(void *arg)
{
    const int limit = *(int *)arg;
    unsigned long seen = (unsigned long)-1;
    int still = 0, reported = 0;
    for (;;) {
        sleep(1);
        unsigned long now = __atomic_load_n(&g_steps, __ATOMIC_RELAXED);
        if (now != seen) {
            seen = now;
            still = reported = 0;
        } else if (++still >= limit && !reported) {
            fprintf(
                stderr,
                "gpu_hazard %s: [rank %d] watchdog: no progress for %d s, in %s(), in the call after gpu_hazard.c:%d\n",
                scen, rank, still, (const char *)g_step_func, g_step_line);
            fflush(stderr);
            reported = 1;
        }
    }
    return NULL;
}

static void watchdog_start(void)
{
    static int limit = 20;
    const char *e = getenv("GPU_HAZARD_WATCHDOG");
    if (e) limit = atoi(e);
    if (limit <= 0) return;
    pthread_t t;
    if (pthread_create(&t, NULL, watchdog_main, &limit) == 0) pthread_detach(t);
}

/* ---------------------------------------------------------------------------------------- */
/* memory of every kind, read and written through one path                                 */

#define POISON 0xAB
#define GUARD 256

/* the kind "device" buffers get: cudaMalloc, or malloc with --host */
static int dev_kind(void)
{
    return host_mode ? MK_MALLOC : MK_DEV;
}

/* A buffer of n bytes with GUARD poisoned bytes on each side; p is what MPI is given. */
typedef struct {
    int kind;
    size_t n;
    unsigned char *base;
    void *p;
} gbuf_t;

static gbuf_t gb_new(int kind, size_t n)
{
    gbuf_t g;
    g.kind = kind;
    g.n = n;
    g.base = mk_alloc(kind, n + 2 * GUARD);
    g.p = g.base + GUARD;
    unsigned char *h = malloc(n + 2 * GUARD);
    memset(h, POISON, n + 2 * GUARD);
    put_bytes(kind, g.base, h, n + 2 * GUARD);
    free(h);
    return g;
}

static gbuf_t gb_dev(size_t n)
{
    return gb_new(dev_kind(), n);
}

/* a device buffer holding src */
static gbuf_t gb_dev_from(const void *src, size_t n)
{
    gbuf_t g = gb_new(dev_kind(), n);
    put_bytes(g.kind, g.p, src, n);
    return g;
}

static void gb_put(gbuf_t *g, const void *src)
{
    put_bytes(g->kind, g->p, src, g->n);
}

/* re-poison the body (guards keep theirs) */
static void gb_poison(gbuf_t *g)
{
    unsigned char *h = malloc(g->n + 1);
    memset(h, POISON, g->n + 1);
    put_bytes(g->kind, g->p, h, g->n);
    free(h);
}

static void gb_free(gbuf_t *g)
{
    mk_free(g->kind, g->base);
    g->base = NULL;
    g->p = NULL;
}

/* several at once (a null ends the list) */
static void gb_free_all(gbuf_t *g, ...)
{
    va_list ap;
    va_start(ap, g);
    for (; g; g = va_arg(ap, gbuf_t *)) gb_free(g);
    va_end(ap);
}

/* whole image (guards included) on the host; the body starts at [GUARD] */
static unsigned char *gb_image(const gbuf_t *g)
{
    unsigned char *h = malloc(g->n + 2 * GUARD);
    get_bytes(g->kind, h, g->base, g->n + 2 * GUARD);
    return h;
}

static int guards_ok(const unsigned char *img, size_t n, const char *what)
{
    for (size_t i = 0; i < GUARD; i++) {
        if (img[i] != POISON) {
            CHECK(0, "%s: guard byte %zd before the buffer overwritten (0x%02x)", what, (ssize_t)i - GUARD, img[i]);
            return 0;
        }
        if (img[GUARD + n + i] != POISON) {
            CHECK(0, "%s: guard byte %zu after the buffer overwritten (0x%02x)", what, i, img[GUARD + n + i]);
            return 0;
        }
    }
    return 1;
}

/* The buffer must hold exactly want (n bytes; poison where MPI must not write) and its guards
 * the poison. esize: element size for the message. Returns 1 when it does. */
static int gb_expect(const gbuf_t *g, const void *want, size_t esize, const char *what)
{
    unsigned char *img = gb_image(g);
    int ok = guards_ok(img, g->n, what);
    const unsigned char *w = want;
    for (size_t i = 0; i < g->n; i++)
        if (img[GUARD + i] != w[i]) {
            size_t e = i / esize;
            char got[64] = "", exp[64] = "";
            for (size_t k = 0; k < esize && k < 8; k++) {
                sprintf(got + 2 * k, "%02x", img[GUARD + e * esize + k]);
                sprintf(exp + 2 * k, "%02x", w[e * esize + k]);
            }
            if (esize == 4) {
                int gi, wi;
                float gf, wf;
                memcpy(&gi, img + GUARD + e * 4, 4);
                memcpy(&wi, w + e * 4, 4);
                memcpy(&gf, &gi, 4);
                memcpy(&wf, &wi, 4);
                CHECK(0, "%s: element %zu is 0x%s (int %d, float %g), want 0x%s (int %d, float %g)%s", what, e, got, gi,
                      gf, exp, wi, wf,
                      wi == (int)0xABABABAB   ? " (written where MPI must not write)"
                      : gi == (int)0xABABABAB ? " (never written)"
                                              : "");
            } else {
                CHECK(0, "%s: element %zu (byte %zu) is 0x%s, want 0x%s", what, e, i, got, exp);
            }
            ok = 0;
            break;
        }
    free(img);
    return ok;
}

/* a host image of n bytes of poison, to be filled with what MPI must write */
static void *poisoned(size_t n)
{
    void *h = malloc(n + 1);
    memset(h, POISON, n + 1);
    return h;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static MPI_Comm fresh_dup(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    return c;
}

/* an Allreduce(SUM) of n ints on device buffers of comm c, checked */
static void dev_allreduce_check(MPI_Comm c, int n, int salt, const char *what)
{
    int cr, cs;
    MPI_Comm_rank(c, &cr);
    MPI_Comm_size(c, &cs);
    int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        h[i] = (cr + 1) * (i % 97 + salt) - 3 * i;
        want[i] = (cs * (cs + 1) / 2) * (i % 97 + salt) - 3 * i * cs;
    }
    gbuf_t s = gb_dev_from(h, n * sizeof(int)), r = gb_dev(n * sizeof(int));
    STEP();
    int rc = MPI_Allreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c);
    CHECK(rc == MPI_SUCCESS, "%s: MPI_Allreduce returned %d", what, rc);
    gb_expect(&r, want, 4, what);
    gb_expect(&s, h, 4, what); /* the send buffer is not modified */
    gb_free(&s);
    gb_free(&r);
    free(h);
    free(want);
}

/* ---------------------------------------------------------------------------------------- */
/* 1. layout_gather                                                                         */

static float gval(int r, int j, int salt)
{
    return (float)(100 * r + j + 1 + 1000 * salt) + 0.5f;
}

/* 4 floats, the j-th at index j*size: recvcount 1 per rank puts rank r's j-th at r + size*j */
static MPI_Datatype strided4(void)
{
    MPI_Datatype v, t;
    MPI_Type_vector(4, 1, size, MPI_FLOAT, &v);
    MPI_Type_create_resized(v, 0, sizeof(float), &t);
    MPI_Type_commit(&t);
    MPI_Type_free(&v);
    return t;
}

static void sc_layout_gather(void)
{
    MPI_Datatype st = strided4();
    const size_t all = 4 * (size_t)size * sizeof(float);
    int roots[2] = {0, size - 1};
    for (int k = 0; k < 2; k++) {
        int root = roots[k];
        if (k == 1 && root == roots[0]) break;
        char what[96];
        /* Gather: contiguous in, strided at the root */
        float mine[4];
        for (int j = 0; j < 4; j++) mine[j] = gval(rank, j, k);
        gbuf_t s = gb_dev_from(mine, sizeof(mine)), r = gb_dev(all);
        STEP();
        int rc = MPI_Gather(s.p, 4, MPI_FLOAT, r.p, 1, st, root, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Gather root %d returned %d", root, rc);
        float *want = poisoned(all);
        if (rank == root)
            for (int q = 0; q < size; q++)
                for (int j = 0; j < 4; j++) want[q + size * j] = gval(q, j, k);
        snprintf(what, sizeof(what), "Gather to root %d, strided receive type", root);
        gb_expect(&r, want, 4, what); /* non-roots: recvbuf untouched */
        gb_expect(&s, mine, 4, "Gather send buffer");
        gb_free(&s);
        gb_free(&r);
        /* Scatter mirrored: strided at the root, contiguous at the leaves */
        gbuf_t src = {0};
        if (rank == root) {
            float *h = malloc(all);
            for (int q = 0; q < size; q++)
                for (int j = 0; j < 4; j++) h[q + size * j] = gval(q, j, k + 5);
            src = gb_dev_from(h, all);
            free(h);
        }
        r = gb_dev(4 * sizeof(float));
        STEP();
        rc = MPI_Scatter(rank == root ? src.p : NULL, 1, st, r.p, 4, MPI_FLOAT, root, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Scatter root %d returned %d", root, rc);
        float w4[4];
        for (int j = 0; j < 4; j++) w4[j] = gval(rank, j, k + 5);
        snprintf(what, sizeof(what), "Scatter from root %d, strided send type", root);
        gb_expect(&r, w4, 4, what);
        gb_free(&r);
        if (rank == root) gb_free(&src);
        free(want);
    }
    /* Allgather: even ranks receive strided, odd ranks contiguous (same signature) */
    float mine[4];
    for (int j = 0; j < 4; j++) mine[j] = gval(rank, j, 9);
    gbuf_t s = gb_dev_from(mine, sizeof(mine)), r = gb_dev(all);
    int rc;
    STEP();
    if (rank % 2 == 0)
        rc = MPI_Allgather(s.p, 4, MPI_FLOAT, r.p, 1, st, MPI_COMM_WORLD);
    else
        rc = MPI_Allgather(s.p, 4, MPI_FLOAT, r.p, 4, MPI_FLOAT, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Allgather returned %d", rc);
    float *want = poisoned(all);
    for (int q = 0; q < size; q++)
        for (int j = 0; j < 4; j++) want[rank % 2 == 0 ? q + size * j : 4 * q + j] = gval(q, j, 9);
    gb_expect(&r, want, 4, rank % 2 == 0 ? "Allgather into the strided type" : "Allgather into contiguous floats");
    free(want);
    gb_free(&s);
    gb_free(&r);
    MPI_Type_free(&st);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. layout_bcast                                                                          */

#define BC_N 1000
#define BC_LD 7
#define BC_COL 3

static void sc_layout_bcast(void)
{
    MPI_Datatype col;
    MPI_Type_vector(BC_N, 1, BC_LD, MPI_FLOAT, &col);
    MPI_Type_commit(&col);
    const size_t mat = (size_t)BC_N * BC_LD * sizeof(float), vec = BC_N * sizeof(float);
    /* a) root size-1 sends a column of its matrix, the others receive contiguous floats */
    int root = size - 1;
    float *m = malloc(mat), *colv = malloc(vec);
    for (int i = 0; i < BC_N * BC_LD; i++) m[i] = (float)i + 0.25f;
    for (int i = 0; i < BC_N; i++) colv[i] = m[i * BC_LD + BC_COL];
    gbuf_t b = rank == root ? gb_dev_from(m, mat) : gb_dev(vec);
    int rc;
    STEP();
    if (rank == root)
        rc = MPI_Bcast((float *)b.p + BC_COL, 1, col, root, MPI_COMM_WORLD);
    else
        rc = MPI_Bcast(b.p, BC_N, MPI_FLOAT, root, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Bcast of a column returned %d", rc);
    if (rank == root)
        gb_expect(&b, m, 4, "Bcast root's matrix (column sent) must be unchanged");
    else
        gb_expect(&b, colv, 4, "Bcast of a column into contiguous floats");
    gb_free(&b);
    /* b) root 0 sends contiguous floats, every leaf receives into a column of a matrix */
    root = 0;
    for (int i = 0; i < BC_N; i++) colv[i] = (float)(5000 + 3 * i) + 0.75f;
    b = rank == root ? gb_dev_from(colv, vec) : gb_dev(mat);
    STEP();
    if (rank == root)
        rc = MPI_Bcast(b.p, BC_N, MPI_FLOAT, root, MPI_COMM_WORLD);
    else
        rc = MPI_Bcast((float *)b.p + BC_COL, 1, col, root, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Bcast into a column returned %d", rc);
    if (rank == root) {
        gb_expect(&b, colv, 4, "Bcast root's contiguous buffer must be unchanged");
    } else {
        float *want = poisoned(mat);
        for (int i = 0; i < BC_N; i++) want[i * BC_LD + BC_COL] = colv[i];
        gb_expect(&b, want, 4, "Bcast into a column: column set, gaps untouched");
        free(want);
    }
    gb_free(&b);
    free(m);
    free(colv);
    MPI_Type_free(&col);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. layout_reduce                                                                         */

/* Predefined operations on derived datatypes. MPI-3.1 (5.9.1-5.9.2) defines the predefined
 * operators on the predefined datatypes, with the same datatype on every process; some MPIs also
 * accept derived datatypes built from one predefined type, Open MPI 4.1 refuses them
 * (MPI_ERR_OP, on the ranks that pass one: the others would wait forever). So the reductions of
 * layout_reduce, bottom and signature_pipelined take the mixed-datatype form only where the MPI
 * underneath accepts it (probed with host buffers on a dup of MPI_COMM_SELF), and otherwise the
 * same layouts with a user-defined sum (legal on any datatype) and one datatype on all ranks. */
static int derived_ops_supported(void)
{
    static int cached = -1;
    if (cached >= 0) return cached;
    MPI_Comm self;
    STEP();
    MPI_Comm_dup(MPI_COMM_SELF, &self);
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    MPI_Datatype c3;
    MPI_Type_contiguous(3, MPI_INT, &c3);
    MPI_Type_commit(&c3);
    int in[3] = {1, 2, 3}, out[3] = {-777, -777, -777};
    STEP();
    int rc = MPI_Allreduce(in, out, 1, c3, MPI_SUM, self);
    int ok = rc == MPI_SUCCESS && out[0] == 1 && out[1] == 2 && out[2] == 3, all = 0;
    STEP();
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Type_free(&c3);
    STEP();
    MPI_Comm_free(&self);
    if (rank == 0 && !all)
        printf(
            "gpu_hazard %s: note: this MPI rejects MPI_SUM on derived datatypes; the reductions on derived "
            "datatypes use a user-defined sum and the same datatype on every rank\n",
            scen);
    return cached = all;
}

/* Layouts the user-defined sums know: item k's e-th element at lb + k*extent + e*stride*4. */
typedef struct {
    MPI_Datatype t;
    MPI_Aint lb, extent;
    int nelem, stride;
} layout_t;
static layout_t g_layouts[8];
static int g_nlayouts;

static void layout_register(MPI_Datatype t, MPI_Aint lb, int nelem, int stride)
{
    MPI_Aint l, ext;
    MPI_Type_get_extent(t, &l, &ext);
    if (g_nlayouts == 8) g_nlayouts = 0;
    g_layouts[g_nlayouts++] = (layout_t){t, lb, ext, nelem, stride};
}

static void uop_sum(void *in, void *io, int *len, MPI_Datatype *dt, int isfloat)
{
    MPI_Aint lb = 0, ext = 4;
    int nelem = 1, stride = 1, found = *dt == MPI_INT || *dt == MPI_FLOAT;
    for (int i = g_nlayouts - 1; !found && i >= 0; i--)
        if (g_layouts[i].t == *dt) {
            lb = g_layouts[i].lb;
            ext = g_layouts[i].extent;
            nelem = g_layouts[i].nelem;
            stride = g_layouts[i].stride;
            found = 1;
        }
    if (!found) { /* a datatype made by a layer below the program: must be dense 4-byte elements */
        int sz = 0;
        MPI_Aint tlb, text, l;
        MPI_Type_size(*dt, &sz);
        MPI_Type_get_true_extent(*dt, &tlb, &text);
        MPI_Type_get_extent(*dt, &l, &ext);
        if ((MPI_Aint)sz != text || sz % 4) {
            fprintf(stderr, "gpu_hazard %s: user-defined sum called with an unknown non-dense datatype\n", scen);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        lb = tlb;
        nelem = sz / 4;
    }
    for (MPI_Aint k = 0; k < *len; k++)
        for (MPI_Aint e = 0; e < nelem; e++) {
            MPI_Aint off = lb + k * ext + e * stride * 4;
            if (isfloat)
                *(float *)((char *)io + off) += *(const float *)((const char *)in + off);
            else
                *(int *)((char *)io + off) += *(const int *)((const char *)in + off);
        }
}

static void uop_isum(void *in, void *io, int *len, MPI_Datatype *dt)
{
    uop_sum(in, io, len, dt, 0);
}

static void uop_fsum(void *in, void *io, int *len, MPI_Datatype *dt)
{
    uop_sum(in, io, len, dt, 1);
}

static int rval(int r, int i)
{
    return (i * 7 + r * 13) % 2001 - 1000 + r;
}

static void sc_layout_reduce(void)
{
    const int k = 3, m = 1000, n = k * m;
    const int mixed = derived_ops_supported();
    MPI_Op isum;
    MPI_Op_create(uop_isum, 1, &isum);
    MPI_Datatype c3, v2;
    MPI_Type_contiguous(k, MPI_INT, &c3);
    MPI_Type_commit(&c3);
    MPI_Type_vector(m, 1, 2, MPI_INT, &v2);
    MPI_Type_commit(&v2);
    layout_register(c3, 0, k, 1);
    layout_register(v2, 0, m, 2);
    /* Allreduce: count m of contiguous(3 int) on even ranks, 3m MPI_INT on odd ranks (or, where
     * the MPI refuses MPI_SUM on derived types: contiguous(3 int) with a user sum everywhere) */
    int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        h[i] = rval(rank, i);
        want[i] = 0;
        for (int q = 0; q < size; q++) want[i] += rval(q, i);
    }
    gbuf_t s = gb_dev_from(h, n * sizeof(int)), r = gb_dev(n * sizeof(int));
    int rc;
    const char *what;
    if (!mixed) {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, m, c3, isum, MPI_COMM_WORLD);
        what = "Allreduce of contiguous(3,int) x m, user-defined sum";
    } else if (rank % 2 == 0) {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, m, c3, MPI_SUM, MPI_COMM_WORLD);
        what = "Allreduce of contiguous(3,int) x m";
    } else {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        what = "Allreduce of 3m int";
    }
    CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
    gb_expect(&r, want, 4, what);
    gb_expect(&s, h, 4, "Allreduce send buffer");
    gb_free(&s);
    gb_free(&r);
    /* Reduce to 0: the root's buffers are vector(m,1,2,int), the others m contiguous ints (or,
     * with the user sum: vector(m,1,2,int) on every rank) */
    int strided = rank == 0 || !mixed;
    int *sv = malloc(2 * m * sizeof(int));
    for (int i = 0; i < m; i++) {
        sv[2 * i] = rval(rank, i);
        sv[2 * i + 1] = 424242 + i; /* in the gaps: must not be summed or moved */
    }
    if (strided) {
        s = gb_dev_from(sv, 2 * m * sizeof(int));
        if (rank == 0) r = gb_dev(2 * m * sizeof(int));
        STEP();
        rc = MPI_Reduce(s.p, rank == 0 ? r.p : NULL, 1, v2, mixed ? MPI_SUM : isum, 0, MPI_COMM_WORLD);
        gb_expect(&s, sv, 4, "Reduce send buffer (vector)");
    } else {
        s = gb_dev_from(h, m * sizeof(int));
        STEP();
        rc = MPI_Reduce(s.p, NULL, m, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    CHECK(rc == MPI_SUCCESS, "Reduce returned %d", rc);
    if (rank == 0) {
        int *w = poisoned(2 * m * sizeof(int));
        for (int i = 0; i < m; i++) {
            w[2 * i] = 0;
            for (int q = 0; q < size; q++) w[2 * i] += rval(q, i);
        }
        gb_expect(&r, w, 4, "Reduce into vector(m,1,2,int) at the root: even slots summed, gaps untouched");
        free(w);
        gb_free(&r);
    }
    gb_free(&s);
    free(sv);
    free(h);
    free(want);
    MPI_Type_free(&c3);
    MPI_Type_free(&v2);
    MPI_Op_free(&isum);
    g_nlayouts = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* 4.-6. empty contributions with NULL buffers as the first device call of a communicator  */

static int eval(int from, int to, int e)
{
    return from * 100000 + to * 1000 + e + 7;
}

static void gatherv_case(int nonblocking)
{
    MPI_Comm c = fresh_dup();
    const char *fn = nonblocking ? "Igatherv" : "Gatherv";
    int mycount = rank == 1 ? 0 : rank + 1;
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), total = 0;
    for (int q = 0; q < size; q++) {
        counts[q] = q == 1 ? 0 : q + 1;
        displs[q] = total;
        total += counts[q] + 1; /* a one-int gap after each block */
    }
    int *mine = malloc((mycount + 1) * sizeof(int));
    for (int e = 0; e < mycount; e++) mine[e] = eval(rank, 0, e);
    gbuf_t s = {0}, r = {0};
    if (mycount) s = gb_dev_from(mine, mycount * sizeof(int));
    if (rank == 0) r = gb_dev(total * sizeof(int));
    void *sp = mycount ? s.p : NULL; /* rank 1: 0 elements from NULL */
    int rc;
    if (nonblocking) {
        MPI_Request q;
        STEP();
        rc = MPI_Igatherv(sp, mycount, MPI_INT, rank == 0 ? r.p : NULL, rank == 0 ? counts : NULL,
                          rank == 0 ? displs : NULL, MPI_INT, 0, c, &q);
        STEP();
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        STEP();
        rc = MPI_Gatherv(sp, mycount, MPI_INT, rank == 0 ? r.p : NULL, rank == 0 ? counts : NULL,
                         rank == 0 ? displs : NULL, MPI_INT, 0, c);
    }
    CHECK(rc == MPI_SUCCESS, "%s returned %d", fn, rc);
    if (rank == 0) {
        int *want = poisoned(total * sizeof(int));
        for (int q = 0; q < size; q++)
            for (int e = 0; e < counts[q]; e++) want[displs[q] + e] = eval(q, 0, e);
        char what[64];
        snprintf(what, sizeof(what), "%s with an empty NULL contribution from rank 1", fn);
        gb_expect(&r, want, 4, what);
        free(want);
        gb_free(&r);
    }
    if (mycount) gb_free(&s);
    dev_allreduce_check(c, 1031, 5, nonblocking ? "Allreduce after Igatherv" : "Allreduce after Gatherv");
    STEP();
    MPI_Barrier(c);
    STEP();
    MPI_Comm_free(&c);
    free(mine);
    free(counts);
    free(displs);
}

static void sc_empty_gatherv_first(void)
{
    gatherv_case(0);
    gatherv_case(1);
}

static void alltoallv_case(int nonblocking)
{
    MPI_Comm c = fresh_dup();
    const int L = size - 1; /* exchanges nothing, passes NULL buffers */
    int *sc = calloc(size, sizeof(int)), *sd = calloc(size, sizeof(int));
    int *rcn = calloc(size, sizeof(int)), *rd = calloc(size, sizeof(int));
    int stot = 0, rtot = 0;
    if (rank != L)
        for (int j = 0; j < size; j++) {
            sc[j] = j == L ? 0 : rank + j + 1;
            rcn[j] = j == L ? 0 : j + rank + 1;
            sd[j] = stot;
            rd[j] = rtot;
            stot += sc[j] + 1;
            rtot += rcn[j] + 2;
        }
    gbuf_t s = {0}, r = {0};
    int *want = NULL;
    if (rank != L) {
        int *h = malloc(stot * sizeof(int));
        for (int i = 0; i < stot; i++) h[i] = -5;
        for (int j = 0; j < size; j++)
            for (int e = 0; e < sc[j]; e++) h[sd[j] + e] = eval(rank, j, e);
        s = gb_dev_from(h, stot * sizeof(int));
        free(h);
        r = gb_dev(rtot * sizeof(int));
        want = poisoned(rtot * sizeof(int));
        for (int j = 0; j < size; j++)
            for (int e = 0; e < rcn[j]; e++) want[rd[j] + e] = eval(j, rank, e);
    }
    int rc;
    if (nonblocking) {
        MPI_Request q;
        STEP();
        rc = MPI_Ialltoallv(rank == L ? NULL : s.p, sc, sd, MPI_INT, rank == L ? NULL : r.p, rcn, rd, MPI_INT, c, &q);
        STEP();
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        STEP();
        rc = MPI_Alltoallv(rank == L ? NULL : s.p, sc, sd, MPI_INT, rank == L ? NULL : r.p, rcn, rd, MPI_INT, c);
    }
    CHECK(rc == MPI_SUCCESS, "%s returned %d", nonblocking ? "Ialltoallv" : "Alltoallv", rc);
    if (rank != L) {
        gb_expect(&r, want, 4,
                  nonblocking ? "Ialltoallv (last rank empty, NULL)" : "Alltoallv (last rank empty, NULL)");
        gb_free(&s);
        gb_free(&r);
        free(want);
    }
    dev_allreduce_check(c, 517, 11, nonblocking ? "Allreduce after Ialltoallv" : "Allreduce after Alltoallv");
    STEP();
    MPI_Comm_free(&c);
    free(sc);
    free(sd);
    free(rcn);
    free(rd);
}

static void sc_empty_alltoallv_first(void)
{
    alltoallv_case(0);
    alltoallv_case(1);
}

static void scatterv_case(int nonblocking)
{
    MPI_Comm c = fresh_dup();
    const int E = size - 1; /* this leaf receives 0 elements into NULL */
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int)), total = 0;
    for (int q = 0; q < size; q++) {
        counts[q] = q == E ? 0 : q + 2;
        displs[q] = total;
        total += counts[q] + 3;
    }
    gbuf_t s = {0}, r = {0};
    if (rank == 0) {
        int *h = malloc(total * sizeof(int));
        for (int i = 0; i < total; i++) h[i] = -9;
        for (int q = 0; q < size; q++)
            for (int e = 0; e < counts[q]; e++) h[displs[q] + e] = eval(0, q, e);
        s = gb_dev_from(h, total * sizeof(int));
        free(h);
    }
    int mycount = counts[rank];
    if (mycount) r = gb_dev(mycount * sizeof(int));
    void *rp = mycount ? r.p : NULL;
    int rc;
    if (nonblocking) {
        MPI_Request q;
        STEP();
        rc = MPI_Iscatterv(rank == 0 ? s.p : NULL, rank == 0 ? counts : NULL, rank == 0 ? displs : NULL, MPI_INT, rp,
                           mycount, MPI_INT, 0, c, &q);
        STEP();
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        STEP();
        rc = MPI_Scatterv(rank == 0 ? s.p : NULL, rank == 0 ? counts : NULL, rank == 0 ? displs : NULL, MPI_INT, rp,
                          mycount, MPI_INT, 0, c);
    }
    CHECK(rc == MPI_SUCCESS, "%s returned %d", nonblocking ? "Iscatterv" : "Scatterv", rc);
    if (mycount) {
        int *want = malloc(mycount * sizeof(int));
        for (int e = 0; e < mycount; e++) want[e] = eval(0, rank, e);
        gb_expect(
            &r, want, 4,
            nonblocking ? "Iscatterv (last rank receives 0 into NULL)" : "Scatterv (last rank receives 0 into NULL)");
        free(want);
        gb_free(&r);
    }
    if (rank == 0) gb_free(&s);
    dev_allreduce_check(c, 263, 2, nonblocking ? "Allreduce after Iscatterv" : "Allreduce after Scatterv");
    STEP();
    MPI_Comm_free(&c);
    free(counts);
    free(displs);
}

static void sc_empty_scatterv(void)
{
    scatterv_case(0);
    scatterv_case(1);
}

/* ---------------------------------------------------------------------------------------- */
/* 7. bottom: absolute addresses (MPI_BOTTOM) and a negative lower bound                    */

static MPI_Datatype abs_type(void *p, int n)
{
    MPI_Aint a;
    MPI_Get_address(p, &a);
    int bl = n;
    MPI_Datatype t;
    MPI_Type_create_hindexed(1, &bl, &a, MPI_FLOAT, &t);
    MPI_Type_commit(&t);
    return t;
}

static void sc_bottom(void)
{
    const int n = 1000;
    const size_t nb = n * sizeof(float);
    float *h = malloc(nb), *want = malloc(nb);
    /* Bcast(MPI_BOTTOM, 1, hindexed at the buffer's address) */
    for (int i = 0; i < n; i++) h[i] = (float)(3 * i + 11) + 0.5f;
    gbuf_t b = rank == 0 ? gb_dev_from(h, nb) : gb_dev(nb);
    MPI_Datatype t = abs_type(b.p, n);
    STEP();
    int rc = MPI_Bcast(MPI_BOTTOM, 1, t, 0, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Bcast(MPI_BOTTOM) returned %d", rc);
    gb_expect(&b, h, 4, "Bcast(MPI_BOTTOM, 1, hindexed at the device buffer)");
    MPI_Type_free(&t);
    gb_free(&b);
    /* Allreduce in place (MPI_Allreduce has one datatype for both buffers, so MPI_BOTTOM goes
     * with MPI_IN_PLACE): even ranks (MPI_BOTTOM, 1, hindexed), odd ranks (buf, n, MPI_FLOAT);
     * where the MPI refuses MPI_SUM on derived types, every rank (MPI_BOTTOM, 1, hindexed) with a
     * user-defined sum */
    const int mixed = derived_ops_supported();
    MPI_Op fsum;
    MPI_Op_create(uop_fsum, 1, &fsum);
    for (int i = 0; i < n; i++) {
        h[i] = (float)((rank + 1) * (i % 50) + i);
        want[i] = (float)((size * (size + 1) / 2) * (i % 50) + size * i);
    }
    b = gb_dev_from(h, nb);
    if (rank % 2 == 0 || !mixed) {
        t = abs_type(b.p, n);
        MPI_Aint a;
        MPI_Get_address(b.p, &a);
        layout_register(t, a, n, 1);
        STEP();
        rc = MPI_Allreduce(MPI_IN_PLACE, MPI_BOTTOM, 1, t, mixed ? MPI_SUM : fsum, MPI_COMM_WORLD);
        MPI_Type_free(&t);
        g_nlayouts = 0;
    } else {
        STEP();
        rc = MPI_Allreduce(MPI_IN_PLACE, b.p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    CHECK(rc == MPI_SUCCESS, "Allreduce(MPI_IN_PLACE, MPI_BOTTOM) returned %d", rc);
    gb_expect(&b, want, 4,
              rank % 2 == 0 || !mixed ? "Allreduce in place on MPI_BOTTOM + hindexed"
                                      : "Allreduce in place beside MPI_BOTTOM ranks");
    gb_free(&b);
    /* Allgather: send side (MPI_BOTTOM, 1, hindexed), receive side n MPI_FLOAT per rank */
    for (int i = 0; i < n; i++) h[i] = (float)(rank * 10000 + i) + 0.25f;
    gbuf_t s = gb_dev_from(h, nb), r = gb_dev(nb * size);
    t = abs_type(s.p, n);
    STEP();
    rc = MPI_Allgather(MPI_BOTTOM, 1, t, r.p, n, MPI_FLOAT, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Allgather(MPI_BOTTOM) returned %d", rc);
    MPI_Type_free(&t);
    float *wa = malloc(nb * size);
    for (int q = 0; q < size; q++)
        for (int i = 0; i < n; i++) wa[q * n + i] = (float)(q * 10000 + i) + 0.25f;
    gb_expect(&r, wa, 4, "Allgather from (MPI_BOTTOM, 1, hindexed) into n floats per rank");
    free(wa);
    gb_free(&s);
    gb_free(&r);
    /* a negative lower bound: hindexed at -64 bytes, buffer pointer 64 bytes into the allocation */
    int bl = n;
    MPI_Aint disp = -64;
    MPI_Datatype neg;
    MPI_Type_create_hindexed(1, &bl, &disp, MPI_FLOAT, &neg);
    MPI_Type_commit(&neg);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(neg, &lb, &ext);
    CHECK(lb == -64, "negative lower bound type: lb %ld", (long)lb);
    int root = size - 1;
    for (int i = 0; i < n; i++) h[i] = (float)(7 * i - 3000) + 0.5f;
    b = rank == root ? gb_dev_from(h, nb) : gb_dev(nb);
    STEP();
    rc = MPI_Bcast((char *)b.p + 64, 1, neg, root, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Bcast with lb -64 returned %d", rc);
    gb_expect(&b, h, 4, "Bcast(buf+64, 1, type with lb -64)");
    gb_free(&b);
    for (int i = 0; i < n; i++) {
        h[i] = (float)(rank * 3 + i % 300);
        want[i] = (float)(3 * size * (size - 1) / 2 + size * (i % 300));
    }
    s = gb_dev_from(h, nb);
    r = gb_dev(nb);
    layout_register(neg, -64, n, 1);
    STEP();
    rc = MPI_Allreduce((char *)s.p + 64, (char *)r.p + 64, 1, neg, mixed ? MPI_SUM : fsum, MPI_COMM_WORLD);
    g_nlayouts = 0;
    CHECK(rc == MPI_SUCCESS, "Allreduce with lb -64 returned %d", rc);
    gb_expect(&r, want, 4, "Allreduce(buf+64, 1, type with lb -64)");
    gb_expect(&s, h, 4, "Allreduce(lb -64) send buffer");
    gb_free(&s);
    gb_free(&r);
    MPI_Type_free(&neg);
    MPI_Op_free(&fsum);
    free(h);
    free(want);
}

/* ---------------------------------------------------------------------------------------- */
/* 8. signature_pipelined: 2 x contiguous(3 Mi float) against 6 Mi MPI_FLOAT                */

static void sc_signature_pipelined(void)
{
    const int blk = 3 * 1024 * 1024, n = 2 * blk;
    const size_t nb = (size_t)n * sizeof(float);
    MPI_Datatype big;
    MPI_Type_contiguous(blk, MPI_FLOAT, &big);
    MPI_Type_commit(&big);
    float *h = malloc(nb), *want = malloc(nb);
    for (int i = 0; i < n; i++) h[i] = (float)(i % 65521) + 0.5f;
    gbuf_t b = rank == 0 ? gb_dev_from(h, nb) : gb_dev(nb);
    int rc;
    STEP();
    if (rank == 0)
        rc = MPI_Bcast(b.p, 2, big, 0, MPI_COMM_WORLD);
    else
        rc = MPI_Bcast(b.p, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Bcast returned %d", rc);
    gb_expect(&b, h, 4,
              rank == 0 ? "Bcast root (2 x contiguous(3Mi float)) unchanged"
                        : "Bcast of 6Mi floats from a 2 x contiguous root");
    gb_free(&b);
    for (int i = 0; i < n; i++) {
        h[i] = (float)((i * 7 + rank * 3) % 4096);
        want[i] = 0;
        for (int q = 0; q < size; q++) want[i] += (float)((i * 7 + q * 3) % 4096);
    }
    /* even ranks 2 x contiguous, odd ranks 6Mi MPI_FLOAT; where the MPI refuses MPI_SUM on derived
     * types: 2 x contiguous with a user-defined sum on every rank */
    const int mixed = derived_ops_supported();
    MPI_Op fsum;
    MPI_Op_create(uop_fsum, 1, &fsum);
    layout_register(big, 0, blk, 1);
    gbuf_t s = gb_dev_from(h, nb), r = gb_dev(nb);
    const char *what = "Allreduce of 2 x contiguous(3Mi float)";
    if (!mixed) {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, 2, big, fsum, MPI_COMM_WORLD);
        what = "Allreduce of 2 x contiguous(3Mi float), user-defined sum";
    } else if (rank % 2 == 0) {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, 2, big, MPI_SUM, MPI_COMM_WORLD);
    } else {
        STEP();
        rc = MPI_Allreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        what = "Allreduce of 6Mi floats";
    }
    CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
    gb_expect(&r, want, 4, what);
    gb_expect(&s, h, 4, "Allreduce send buffer");
    gb_free(&s);
    gb_free(&r);
    free(h);
    free(want);
    MPI_Type_free(&big);
    MPI_Op_free(&fsum);
    g_nlayouts = 0;
}

/* ---------------------------------------------------------------------------------------- */
/* 9. uint8_sum: byte reductions that wrap, on every memory kind                            */

static unsigned char bval(int r, int i, int call)
{
    return (unsigned char)(r * 89 + i * 37 + call * 11 + 130);
}

static void sc_uint8_sum(void)
{
    struct {
        MPI_Datatype t;
        const char *name;
        int is_signed;
    } types[4] = {{MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 0},
                  {MPI_INT8_T, "MPI_INT8_T", 1},
                  {MPI_UINT8_T, "MPI_UINT8_T", 0},
                  {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", 1}};
    MPI_Op ops[2] = {MPI_SUM, MPI_MAX};
    const char *opn[2] = {"MPI_SUM", "MPI_MAX"};
    int counts[2] = {10, 100}, call = 0;
    for (int ti = 0; ti < 4; ti++)
        for (int oi = 0; oi < 2; oi++)
            for (int ci = 0; ci < 2; ci++)
                for (int inplace = 0; inplace < 2; inplace++, call++) {
                    int n = counts[ci];
                    int kind = host_mode  ? MK_MALLOC
                               : rank % 2 ? MK_DEV
                                          : (int[]){MK_MALLOC, MK_PINNED, MK_MANAGED}[call % 3];
                    unsigned char *mine = malloc(n), *want = malloc(n);
                    for (int i = 0; i < n; i++) {
                        mine[i] = bval(rank, i, call);
                        unsigned acc = oi == 0 ? 0 : bval(0, i, call);
                        for (int q = 0; q < size; q++) {
                            unsigned char v = bval(q, i, call);
                            if (oi == 0)
                                acc += v;
                            else if (types[ti].is_signed ? (signed char)v > (signed char)acc : v > acc)
                                acc = v;
                        }
                        want[i] = (unsigned char)acc; /* wraps modulo 256, the same bytes signed or not */
                    }
                    gbuf_t r = gb_new(kind, n), s = {0};
                    int rc;
                    if (inplace) {
                        gb_put(&r, mine);
                        STEP();
                        rc = MPI_Allreduce(MPI_IN_PLACE, r.p, n, types[ti].t, ops[oi], MPI_COMM_WORLD);
                    } else {
                        s = gb_new(kind, n);
                        gb_put(&s, mine);
                        STEP();
                        rc = MPI_Allreduce(s.p, r.p, n, types[ti].t, ops[oi], MPI_COMM_WORLD);
                    }
                    char what[160];
                    snprintf(what, sizeof(what), "Allreduce %s %s count %d%s on %s", types[ti].name, opn[oi], n,
                             inplace ? " in place" : "", mk_name[kind]);
                    CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
                    gb_expect(&r, want, 1, what);
                    if (!inplace) {
                        gb_expect(&s, mine, 1, what);
                        gb_free(&s);
                    }
                    gb_free(&r);
                    free(mine);
                    free(want);
                }
}

/* ---------------------------------------------------------------------------------------- */
/* 10. agree_mixed: even ranks host buffers, odd ranks device buffers                       */

static void sc_agree_mixed(void)
{
    const int kind = host_mode || rank % 2 == 0 ? MK_MALLOC : MK_DEV;
    const int n = 1000, g = 100;
    int *h = malloc(n * sizeof(int)), *want = malloc((size_t)g * size * sizeof(int) + n * sizeof(int));
    /* blocking */
    for (int i = 0; i < n; i++) {
        h[i] = rank * 10 + i;
        want[i] = 10 * size * (size - 1) / 2 + size * i;
    }
    gbuf_t s = gb_new(kind, n * sizeof(int)), r = gb_new(kind, n * sizeof(int));
    gb_put(&s, h);
    STEP();
    int rc = MPI_Allreduce(s.p, r.p, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Allreduce returned %d", rc);
    gb_expect(&r, want, 4, "mixed Allreduce");
    for (int root = 0; root<size; root += size - 1> 0 ? size - 1 : 1) {
        for (int i = 0; i < n; i++) h[i] = rank == root ? root * 7 + i * 5 : -1;
        gb_put(&s, h);
        STEP();
        rc = MPI_Bcast(s.p, n, MPI_INT, root, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Bcast root %d returned %d", root, rc);
        for (int i = 0; i < n; i++) want[i] = root * 7 + i * 5;
        gb_expect(&s, want, 4, root ? "mixed Bcast from the last rank" : "mixed Bcast from rank 0");
        /* Reduce(MAX) to the same root */
        for (int i = 0; i < n; i++) h[i] = (i * 31 + rank * 17) % 1009;
        gb_put(&s, h);
        gb_poison(&r);
        STEP();
        rc = MPI_Reduce(s.p, r.p, n, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Reduce root %d returned %d", root, rc);
        int *w = poisoned(n * sizeof(int));
        if (rank == root)
            for (int i = 0; i < n; i++) {
                w[i] = 0;
                for (int q = 0; q < size; q++)
                    if ((i * 31 + q * 17) % 1009 > w[i]) w[i] = (i * 31 + q * 17) % 1009;
            }
        gb_expect(&r, w, 4, "mixed Reduce(MAX) (non-roots: receive buffer untouched)");
        free(w);
        if (size == 1) break;
    }
    gb_free(&r);
    gbuf_t ag = gb_new(kind, (size_t)g * size * sizeof(int));
    for (int i = 0; i < g; i++) h[i] = rank * 1000 + i;
    gb_put(&s, h);
    STEP();
    rc = MPI_Allgather(s.p, g, MPI_INT, ag.p, g, MPI_INT, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "Allgather returned %d", rc);
    for (int q = 0; q < size; q++)
        for (int i = 0; i < g; i++) want[q * g + i] = q * 1000 + i;
    gb_expect(&ag, want, 4, "mixed Allgather");
    gb_free(&ag);
    gb_free(&s);
    /* nonblocking, completed by one Waitall */
    int *h1 = malloc(n * sizeof(int)), *h2 = malloc(n * sizeof(int)), *h3 = malloc(g * sizeof(int));
    for (int i = 0; i < n; i++) {
        h1[i] = rank - 3 * i;
        h2[i] = rank == size - 1 ? 99 * i + 1 : 0x5a5a;
    }
    for (int i = 0; i < g; i++) h3[i] = -rank * 1000 - i;
    gbuf_t s1 = gb_new(kind, n * sizeof(int)), r1 = gb_new(kind, n * sizeof(int)), b2 = gb_new(kind, n * sizeof(int));
    gbuf_t s3 = gb_new(kind, g * sizeof(int)), r3 = gb_new(kind, (size_t)g * size * sizeof(int));
    gb_put(&s1, h1);
    gb_put(&b2, h2);
    gb_put(&s3, h3);
    MPI_Request q[3];
    STEP();
    int rc1 = MPI_Iallreduce(s1.p, r1.p, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[0]);
    STEP();
    int rc2 = MPI_Ibcast(b2.p, n, MPI_INT, size - 1, MPI_COMM_WORLD, &q[1]);
    STEP();
    int rc3 = MPI_Iallgather(s3.p, g, MPI_INT, r3.p, g, MPI_INT, MPI_COMM_WORLD, &q[2]);
    CHECK(rc1 == MPI_SUCCESS && rc2 == MPI_SUCCESS && rc3 == MPI_SUCCESS, "nonblocking starts returned %d %d %d", rc1,
          rc2, rc3);
    STEP();
    rc = MPI_Waitall(3, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall returned %d", rc);
    for (int i = 0; i < n; i++) want[i] = size * (size - 1) / 2 - 3 * i * size;
    gb_expect(&r1, want, 4, "mixed Iallreduce");
    for (int i = 0; i < n; i++) want[i] = 99 * i + 1;
    gb_expect(&b2, want, 4, "mixed Ibcast");
    for (int p = 0; p < size; p++)
        for (int i = 0; i < g; i++) want[p * g + i] = -p * 1000 - i;
    gb_expect(&r3, want, 4, "mixed Iallgather");
    gb_free(&s1);
    gb_free(&r1);
    gb_free(&b2);
    gb_free(&s3);
    gb_free(&r3);
    free(h1);
    free(h2);
    free(h3);
    free(h);
    free(want);
}

/* ---------------------------------------------------------------------------------------- */
/* 11. threads: two communicators entered in opposite orders by two threads                 */

typedef struct {
    MPI_Comm comm;
    int tid, delay_us, nonblocking;
} thr_arg_t;

static void *thr_main(void *vp)
{
    thr_arg_t *a = vp;
    if (!host_mode) CUDACHECK(cudaSetDevice(g_dev)); /* the device is per host thread */
    if (a->delay_us) usleep(a->delay_us);
    const int n = 2048;
    int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
    gbuf_t s = gb_dev(n * sizeof(int)), r = gb_dev(n * sizeof(int));
    for (int it = 0; it < 50; it++) {
        for (int i = 0; i < n; i++) {
            h[i] = rank * 31 + a->tid * 1000 + it * 7 + i;
            want[i] = 31 * size * (size - 1) / 2 + size * (a->tid * 1000 + it * 7 + i);
        }
        gb_put(&s, h);
        gb_poison(&r);
        int rc;
        if (a->nonblocking) {
            MPI_Request q;
            STEP();
            rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, a->comm, &q);
            STEP();
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            STEP();
            rc = MPI_Allreduce(s.p, r.p, n, MPI_INT, MPI_SUM, a->comm);
        }
        char what[96];
        snprintf(what, sizeof(what), "thread %d %s iteration %d", a->tid,
                 a->nonblocking ? "Iallreduce+Wait" : "Allreduce", it);
        CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
        if (!gb_expect(&r, want, 4, what)) break;
    }
    gb_free(&s);
    gb_free(&r);
    free(h);
    free(want);
    return NULL;
}

/* fn on two threads at once, one argument each (args[0], args[1], of size bytes), joined */
static void two_threads(const char *scenario, void *(*fn)(void *), void *args, size_t size)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, fn, (char *)args + i * size)) {
            fprintf(stderr, "gpu_hazard %s: pthread_create failed\n", scenario);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

static void sc_threads(void)
{
    MPI_Comm A = fresh_dup(), B = fresh_dup();
    for (int nb = 0; nb < 2; nb++) {
        thr_arg_t a[2] = {{A, 0, rank % 2 ? 20000 : 0, nb}, {B, 1, rank % 2 ? 0 : 20000, nb}};
        two_threads("threads", thr_main, a, sizeof(a[0]));
    }
    STEP();
    MPI_Comm_free(&A);
    STEP();
    MPI_Comm_free(&B);
}

/* ---------------------------------------------------------------------------------------- */
/* 11b. thread_comms: T threads (default 4) under MPI_THREAD_MULTIPLE, each with its own
 * duplicate of MPI_COMM_WORLD made before the threads start and its own non-blocking stream for
 * its fills; each does R rounds (default 60) of a device MPI_Allreduce(SUM, float) and an
 * MPI_Bcast, 1 to 2^18 floats (a real client's pattern: a thread per model shard). Values are
 * small integers, so float sums are exact and every element is checked.                     */

typedef struct {
    MPI_Comm comm;
    int tid, rounds;
} tc_arg_t;

static void tc_fill(gbuf_t *g, const void *src, void *stream)
{
    if (host_mode || !stream) {
        gb_put(g, src);
        return;
    }
    CUDACHECK(cudaMemcpyAsync(g->p, src, g->n, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    CUDACHECK(cudaStreamSynchronize((cudaStream_t)stream)); /* the data is ready at the MPI call */
}

static void *tc_main(void *vp)
{
    tc_arg_t *a = vp;
    cudaStream_t st = NULL;
    if (!host_mode) {
        CUDACHECK(cudaSetDevice(g_dev));
        CUDACHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    }
    const int nmax = 1 << 18;
    float *h = malloc(nmax * sizeof(float)), *want = malloc(nmax * sizeof(float));
    for (int r = 0; r < a->rounds && !failures; r++) {
        const int n = 1 << (r % 19), root = (r + a->tid) % size;
        gbuf_t s = gb_dev(n * sizeof(float)), d = gb_dev(n * sizeof(float));
        for (int i = 0; i < n; i++) {
            h[i] = (float)((rank + 1) * ((i + a->tid + r) % 13 + 1));
            want[i] = (float)(size * (size + 1) / 2 * ((i + a->tid + r) % 13 + 1));
        }
        tc_fill(&s, h, st);
        gb_poison(&d);
        char what[128];
        STEP();
        int rc = MPI_Allreduce(s.p, d.p, n, MPI_FLOAT, MPI_SUM, a->comm);
        snprintf(what, sizeof(what), "thread %d round %d: Allreduce of %d floats", a->tid, r, n);
        CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
        gb_expect(&d, want, 4, what);
        for (int i = 0; i < n; i++) h[i] = (float)(root * 1000 + (i * 7 + a->tid + r) % 1000);
        if (rank == root) tc_fill(&d, h, st);
        else gb_poison(&d);
        STEP();
        rc = MPI_Bcast(d.p, n, MPI_FLOAT, root, a->comm);
        snprintf(what, sizeof(what), "thread %d round %d: Bcast of %d floats from %d", a->tid, r, n, root);
        CHECK(rc == MPI_SUCCESS, "%s returned %d", what, rc);
        gb_expect(&d, h, 4, what);
        gb_free_all(&s, &d, NULL);
    }
    if (st) CUDACHECK(cudaStreamDestroy(st));
    free(h);
    free(want);
    return NULL;
}

static void sc_thread_comms(int argc, char **argv)
{
    const int nt = argc > 0 ? atoi(argv[0]) : 4, rounds = argc > 1 ? atoi(argv[1]) : 60;
    if (nt < 1 || nt > 64 || rounds < 1) {
        fprintf(stderr, "gpu_hazard thread_comms: usage: thread_comms [threads 1..64] [rounds]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    tc_arg_t *a = calloc(nt, sizeof(*a));
    pthread_t *t = calloc(nt, sizeof(*t));
    for (int i = 0; i < nt; i++) a[i] = (tc_arg_t){fresh_dup(), i, rounds};
    for (int i = 0; i < nt; i++)
        if (pthread_create(&t[i], NULL, tc_main, &a[i])) {
            fprintf(stderr, "gpu_hazard thread_comms: pthread_create failed\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    for (int i = 0; i < nt; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < nt; i++) {
        STEP();
        MPI_Comm_free(&a[i].comm);
    }
    free(a);
    free(t);
}

/* ---------------------------------------------------------------------------------------- */
/* 12. first_nb_crossing: a communicator's first (nonblocking) device call crossing p2p    */

static void sc_first_nb_crossing(void)
{
    const int n = 4096, TAG = 12;
    for (int variant = 0; variant < 2; variant++) {
        MPI_Comm c = fresh_dup();
        int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) {
            h[i] = (rank + 1) * (i + variant);
            want[i] = size * (size + 1) / 2 * (i + variant);
        }
        gbuf_t s = gb_dev_from(h, n * sizeof(int)), r = gb_dev(n * sizeof(int));
        MPI_Request q;
        int x = 4711 + variant, got = -777, rc = MPI_SUCCESS, rcw = MPI_SUCCESS;
        if (variant == 0) {
            if (rank == 0) {
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                STEP();
                MPI_Send(&x, 1, MPI_INT, 1, TAG, MPI_COMM_WORLD);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                STEP();
                MPI_Recv(&got, 1, MPI_INT, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
                CHECK(got == x, "host message got %d, want %d", got, x);
            } else {
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
            }
        } else {
            if (rank == 0) {
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                STEP();
                MPI_Recv(&got, 1, MPI_INT, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
                CHECK(got == x, "host message got %d, want %d", got, x);
            } else if (rank == 1) {
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
                STEP();
                MPI_Send(&x, 1, MPI_INT, 0, TAG, MPI_COMM_WORLD);
            } else {
                STEP();
                rc = MPI_Iallreduce(s.p, r.p, n, MPI_INT, MPI_SUM, c, &q);
                rcw = MPI_Wait(&q, MPI_STATUS_IGNORE);
            }
        }
        CHECK(rc == MPI_SUCCESS && rcw == MPI_SUCCESS, "variant %d: Iallreduce %d, Wait %d", variant, rc, rcw);
        gb_expect(&r, want, 4,
                  variant ? "first Iallreduce, Recv before its Wait" : "first Iallreduce crossing a Send/Recv");
        gb_free(&s);
        gb_free(&r);
        free(h);
        free(want);
        STEP();
        MPI_Comm_free(&c);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* 13. comm_free_outstanding                                                                */

static void sc_comm_free_outstanding(void)
{
    const int n = 100000;
    MPI_Comm sub = fresh_dup();
    dev_allreduce_check(sub, 333, 1, "Allreduce on the dup before it is freed");
    int *h = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) h[i] = 7 * i - 12345;
    int x = 1313, got = -777;
    if (rank == 0) {
        gbuf_t r = gb_dev(n * sizeof(int));
        MPI_Request q;
        MPI_Status st;
        STEP();
        MPI_Irecv(r.p, n, MPI_INT, 1, 13, MPI_COMM_WORLD, &q);
        STEP();
        MPI_Comm_free(&sub);
        STEP();
        MPI_Send(&x, 1, MPI_INT, 1, 14, MPI_COMM_WORLD);
        STEP();
        int rc = MPI_Wait(&q, &st);
        int cnt = -1;
        MPI_Get_count(&st, MPI_INT, &cnt);
        CHECK(rc == MPI_SUCCESS && st.MPI_SOURCE == 1 && st.MPI_TAG == 13 && cnt == n,
              "device Irecv across Comm_free: rc %d source %d tag %d count %d", rc, st.MPI_SOURCE, st.MPI_TAG, cnt);
        gb_expect(&r, h, 4, "device Irecv posted before MPI_Comm_free");
        gb_free(&r);
    } else if (rank == 1) {
        STEP();
        MPI_Comm_free(&sub);
        STEP();
        MPI_Recv(&got, 1, MPI_INT, 0, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(got == x, "host message got %d", got);
        gbuf_t s = gb_dev_from(h, n * sizeof(int));
        STEP();
        MPI_Send(s.p, n, MPI_INT, 0, 13, MPI_COMM_WORLD);
        gb_free(&s);
    } else {
        STEP();
        MPI_Comm_free(&sub);
    }
    CHECK(sub == MPI_COMM_NULL, "MPI_Comm_free did not set MPI_COMM_NULL");
    free(h);
}

/* ---------------------------------------------------------------------------------------- */
/* 14. dup_churn                                                                            */

/* the fastest of 3 rounds of 20 x (dup + free), slowest rank; a round slower than stop_above
 * (the same on every rank) ends the measurement: one clearly failing round is enough */
/* The best of up to 3 rounds of 20 x (dup+free), the slowest rank's time; stops early once a
 * round takes at most good_enough (a one-time stall, such as the first dup after a device call
 * on some hosts, then does not decide) */
static double churn20(double good_enough)
{
    double best = 1e30;
    for (int round = 0; round < 3 && best > good_enough; round++) {
        STEP();
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), tdup = 0, worst = 0;
        int worst_i = -1;
        for (int i = 0; i < 20; i++) {
            MPI_Comm c;
            STEP();
            double a = MPI_Wtime();
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
            double d = MPI_Wtime() - a;
            tdup += d;
            if (d > worst) worst = d, worst_i = i;
            STEP();
            MPI_Comm_free(&c);
        }
        double t = MPI_Wtime() - t0, tmax;
        if (getenv("NM_HAZARD_VERBOSE"))
            printf("gpu_hazard dup_churn: rank %d round %d: 20 x dup %.3f ms (slowest: #%d, %.3f ms), free %.3f ms\n",
                   rank, round, tdup * 1e3, worst_i, worst * 1e3, (t - tdup) * 1e3);
        STEP();
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (tmax < best) best = tmax;
    }
    return best;
}

static void sc_dup_churn(void)
{
    for (int i = 0; i < 3; i++) { /* warm-up */
        MPI_Comm c;
        STEP();
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        STEP();
        MPI_Comm_free(&c);
    }
    double t1 = churn20(0);
    dev_allreduce_check(MPI_COMM_WORLD, 1024, 3, "device Allreduce on MPI_COMM_WORLD between the churns");
    double t2 = churn20(2 * t1);
    double ratio = t2 / (t1 > 1e-9 ? t1 : 1e-9);
    /* NM_HAZARD_UNTIMED=1 (test/unit/hazard.sh: the stand-ins, ranks oversubscribing a small
     * machine, whose times say nothing about a GPU's): the loop runs, its ratio is not checked */
    const int untimed = host_mode || getenv("NM_HAZARD_UNTIMED");
    if (rank == 0)
        printf("gpu_hazard dup_churn: 20 x (dup+free) before device use %.3f ms, after %.3f ms, ratio %.2f%s\n",
               t1 * 1e3, t2 * 1e3, ratio, untimed ? " (not checked here)" : "");
    if (!untimed) CHECK(ratio <= 2.0, "dup+free after a device call is %.2fx slower than before (limit 2.0)", ratio);
}

/* ---------------------------------------------------------------------------------------- */
/* 14b. use_churn: communicators made, used on device buffers and freed in a loop             */

/* an Allgather of n ints per rank on device buffers of comm c, checked (rank order shows) */
static void dev_allgather_check(MPI_Comm c, int n, int salt, const char *what)
{
    int cr, cs;
    MPI_Comm_rank(c, &cr);
    MPI_Comm_size(c, &cs);
    int *h = malloc(n * sizeof(int)), *want = malloc((size_t)n * cs * sizeof(int));
    for (int q = 0; q < cs; q++)
        for (int i = 0; i < n; i++) want[(size_t)q * n + i] = q * 100003 + i * 7 + salt;
    memcpy(h, want + (size_t)cr * n, n * sizeof(int));
    gbuf_t s = gb_dev_from(h, n * sizeof(int)), r = gb_dev((size_t)n * cs * sizeof(int));
    STEP();
    int rc = MPI_Allgather(s.p, n, MPI_INT, r.p, n, MPI_INT, c);
    CHECK(rc == MPI_SUCCESS, "%s: MPI_Allgather returned %d", what, rc);
    gb_expect(&r, want, 4, what);
    gb_free(&s);
    gb_free(&r);
    free(h);
    free(want);
}

/* Each iteration makes a communicator (a duplicate, a split of the same order, one with the ranks
 * reversed, or halves) and a duplicate of it or of the parent, runs checked device collectives on
 * both and frees them, every third time with an MPI_Iallreduce still in flight on the first; a
 * later communicator of the same processes in the same order takes over a freed one's NCCL
 * communicator or shared-GPU window (NCCLMPI_COMM_CACHE), one of another order must not. */
enum { CHURN_MAX = 24 };
static void churn_make(MPI_Comm parent, int it, MPI_Comm *a, MPI_Comm *b)
{
    int pr, pn;
    MPI_Comm_rank(parent, &pr);
    MPI_Comm_size(parent, &pn);
    STEP();
    switch (it % 4) {
    case 0: MPI_Comm_dup(parent, a); break;
    case 1: MPI_Comm_split(parent, 0, pr, a); break;
    case 2: MPI_Comm_split(parent, 0, pn - pr, a); break;
    default: MPI_Comm_split(parent, pr % 2, pr, a); break;
    }
    STEP();
    MPI_Comm_dup(it % 2 ? *a : parent, b);
}

/* an MPI_Iallreduce left in flight on a communicator while it is freed (its NCCL side is kept
 * only once the operation completes): odd ranks wait for it at once, even ranks after the next
 * communicator's first collective, so that the ranks may offer different kept sides there. Only
 * where it runs on NCCL (a GPU per rank, under ncclmpi, not staged by a setting): Open MPI 4.1's
 * own nonblocking collectives crash when their communicator is freed before they complete (seen
 * without ncclmpi), so elsewhere every rank waits before the free. */
static int churn_threaded; /* use_churn_threads */
static int churn_pend_across_free(void)
{
    const char *agree = getenv("NCCLMPI_AGREE"), *staged = getenv("NCCLMPI_FORCE_STAGED");
    /* (with threads, NCCLMPI_RENDEZVOUS's turns, on unless it is OFF, may stage a creation that
     * kept meeting another thread's NCCL work, and that communicator has no NCCL side: its
     * nonblocking collectives are Open MPI's own too) */
    const char *rdv = getenv("NCCLMPI_RENDEZVOUS");
    const int turns = churn_threaded && !(rdv && (rdv[0] == 'o' || rdv[0] == 'O') && (rdv[1] == 'f' || rdv[1] == 'F'));
    return !host_mode && g_distinct && dlsym(RTLD_DEFAULT, "ncclmpi_get_stats") && !(agree && agree[0] == '1') &&
           !(staged && staged[0] == '1') && !turns;
}

typedef struct {
    MPI_Request q;
    gbuf_t s, r;
    int *want, live;
} churn_pend_t;
static churn_pend_t churn_pend[2];

static void churn_pend_start(int tid, MPI_Comm c, int it)
{
    churn_pend_t *p = &churn_pend[tid];
    int cr, cs;
    MPI_Comm_rank(c, &cr);
    MPI_Comm_size(c, &cs);
    const int n = 777 + it;
    int *h = malloc(n * sizeof(int));
    p->want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        h[i] = (cr + 1) * (i % 13 + it);
        p->want[i] = cs * (cs + 1) / 2 * (i % 13 + it);
    }
    p->s = gb_dev_from(h, n * sizeof(int));
    p->r = gb_dev(n * sizeof(int));
    free(h);
    STEP();
    int rc = MPI_Iallreduce(p->s.p, p->r.p, n, MPI_INT, MPI_SUM, c, &p->q);
    CHECK(rc == MPI_SUCCESS, "thread %d iteration %d: MPI_Iallreduce returned %d", tid, it, rc);
    p->live = rc == MPI_SUCCESS;
}

static void churn_pend_finish(int tid)
{
    churn_pend_t *p = &churn_pend[tid];
    if (!p->live) return;
    STEP();
    int rc = MPI_Wait(&p->q, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_SUCCESS, "thread %d: MPI_Wait of the Iallreduce on a freed communicator returned %d", tid, rc);
    gb_expect(&p->r, p->want, 4, "Iallreduce on a freed communicator");
    gb_free(&p->s);
    gb_free(&p->r);
    free(p->want);
    p->live = 0;
}

static void churn_use(int tid, int it, MPI_Comm *a, MPI_Comm *b)
{
    char what[96];
    snprintf(what, sizeof(what), "thread %d iteration %d (kind %d)", tid, it, it % 4);
    dev_allgather_check(*a, 3000 + it, it + 100 * tid, what);
    churn_pend_finish(tid); /* (even ranks: the previous iteration's) */
    dev_allreduce_check(*b, 1000 + it, it, what);
    dev_allgather_check(*b, 5 + it, it + 7, what);
    if (it % 3 == 0) churn_pend_start(tid, *a, it);
    if (!churn_pend_across_free()) churn_pend_finish(tid);
    STEP();
    MPI_Comm_free(a); /* (collective: the same order on every rank) */
    STEP();
    MPI_Comm_free(b);
    if (rank % 2) churn_pend_finish(tid);
}

static void sc_use_churn(void)
{
    for (int it = 0; it < CHURN_MAX; it++) {
        MPI_Comm a, b;
        churn_make(MPI_COMM_WORLD, it, &a, &b);
        churn_use(0, it, &a, &b);
    }
    churn_pend_finish(0);
}

/* Two threads use and free communicators of the same processes at once, so that one thread's
 * first device collective (which looks for a kept side) meets the other's MPI_Comm_free (which
 * keeps one). The main thread makes the communicators first: Open MPI 4.1 itself can hang when
 * threads make communicators concurrently (seen without ncclmpi: 3 of 20 runs at 3 ranks). */
typedef struct {
    int tid;
    MPI_Comm a[CHURN_MAX / 2], b[CHURN_MAX / 2];
} churn_arg_t;

static void *churn_thread(void *vp)
{
    churn_arg_t *c = vp;
    if (!host_mode) CUDACHECK(cudaSetDevice(g_dev));
    for (int it = 0; it < CHURN_MAX / 2; it++) churn_use(c->tid, it, &c->a[it], &c->b[it]);
    churn_pend_finish(c->tid);
    return NULL;
}

static void sc_use_churn_threads(void)
{
    static churn_arg_t c[2];
    churn_threaded = 1;
    for (int it = 0; it < CHURN_MAX / 2; it++)
        for (int t = 0; t < 2; t++) {
            c[t].tid = t;
            churn_make(MPI_COMM_WORLD, it, &c[t].a[it], &c[t].b[it]);
        }
    two_threads("use_churn_threads", churn_thread, c, sizeof(c[0]));
}

/* ---------------------------------------------------------------------------------------- */
/* 15. progress: a 64 MiB host Isend must progress while rank 0 waits in a device Allreduce */

static void sc_progress(void)
{
    const size_t n = (64u << 20) / sizeof(int);
    int *big = NULL;
    MPI_Request q;
    if (rank == 0) {
        big = malloc(n * sizeof(int));
        for (size_t i = 0; i < n; i++) big[i] = (int)(i * 2654435761u);
        STEP();
        MPI_Isend(big, (int)n, MPI_INT, 1, 15, MPI_COMM_WORLD, &q);
        dev_allreduce_check(MPI_COMM_WORLD, 4096, 8, "device Allreduce while a 64 MiB host Isend is pending");
        STEP();
        int rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS, "Wait(Isend) returned %d", rc);
    } else if (rank == 1) {
        big = malloc(n * sizeof(int));
        memset(big, POISON, n * sizeof(int));
        MPI_Status st;
        STEP();
        int rc = MPI_Recv(big, (int)n, MPI_INT, 0, 15, MPI_COMM_WORLD, &st);
        CHECK(rc == MPI_SUCCESS, "Recv returned %d", rc);
        for (size_t i = 0; i < n; i++)
            if (big[i] != (int)(i * 2654435761u)) {
                CHECK(0, "64 MiB host message: element %zu is %d", i, big[i]);
                break;
            }
        dev_allreduce_check(MPI_COMM_WORLD, 4096, 8, "device Allreduce after the 64 MiB host Recv");
    } else {
        dev_allreduce_check(MPI_COMM_WORLD, 4096, 8, "device Allreduce");
    }
    free(big);
}

/* ---------------------------------------------------------------------------------------- */
/* 16. coalesce_triggers: whatever may flush queued nonblocking device collectives         */

typedef struct {
    int n;
    gbuf_t *s, *r;
    int **want;
} nbset_t;

static int nbval(int r, int k, int i)
{
    return r * 3 + k * 1000 + i;
}

static nbset_t nb_new(int cnt, int n, int salt)
{
    nbset_t b;
    b.n = n;
    b.s = calloc(cnt, sizeof(gbuf_t));
    b.r = calloc(cnt, sizeof(gbuf_t));
    b.want = calloc(cnt, sizeof(int *));
    int *h = malloc(n * sizeof(int));
    for (int k = 0; k < cnt; k++) {
        b.want[k] = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) {
            h[i] = nbval(rank, k + salt, i);
            b.want[k][i] = 3 * size * (size - 1) / 2 + size * ((k + salt) * 1000 + i);
        }
        b.s[k] = gb_dev_from(h, n * sizeof(int));
        b.r[k] = gb_dev(n * sizeof(int));
    }
    free(h);
    return b;
}

static void nb_start(nbset_t *b, int k, MPI_Comm c, MPI_Request *q)
{
    STEP();
    int rc = MPI_Iallreduce(b->s[k].p, b->r[k].p, b->n, MPI_INT, MPI_SUM, c, q);
    CHECK(rc == MPI_SUCCESS, "Iallreduce %d returned %d", k, rc);
}

static void nb_check_free(nbset_t *b, int cnt, const char *what)
{
    char w[128];
    for (int k = 0; k < cnt; k++) {
        snprintf(w, sizeof(w), "%s, request %d", what, k);
        gb_expect(&b->r[k], b->want[k], 4, w);
        gb_free(&b->s[k]);
        gb_free(&b->r[k]);
        free(b->want[k]);
    }
    free(b->s);
    free(b->r);
    free(b->want);
}

static void sc_coalesce_triggers(void)
{
    const int n = 1024; /* 4 KiB */
    MPI_Comm c = fresh_dup();
    MPI_Request q[64];
    int rc;
    /* 8 Iallreduce, then Waitall / Test polling / an Iprobe in the middle */
    nbset_t b = nb_new(8, n, 0);
    if (rank == 1) {
        for (int k = 0; k < 8; k++) nb_start(&b, k, c, &q[k]);
        for (int t = 0; t < 5; t++) {
            int flag = 0;
            STEP();
            rc = MPI_Test(&q[0], &flag, MPI_STATUS_IGNORE);
            CHECK(rc == MPI_SUCCESS, "Test returned %d", rc);
        }
    } else if (rank == 2) {
        for (int k = 0; k < 4; k++) nb_start(&b, k, c, &q[k]);
        int flag = 0;
        STEP();
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(!flag, "Iprobe found a message nobody sent");
        for (int k = 4; k < 8; k++) nb_start(&b, k, c, &q[k]);
    } else {
        for (int k = 0; k < 8; k++) nb_start(&b, k, c, &q[k]);
    }
    STEP();
    rc = MPI_Waitall(8, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall(8) returned %d", rc);
    nb_check_free(&b, 8, "8 Iallreduce + Waitall");
    /* crossing: rank 0 blocks in a host Recv that rank 1 sends only after its first Iallreduce completed */
    b = nb_new(2, n, 20);
    int x = 1616, got = -777;
    nb_start(&b, 0, c, &q[0]);
    nb_start(&b, 1, c, &q[1]);
    if (rank == 0) {
        STEP();
        MPI_Recv(&got, 1, MPI_INT, 1, 16, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(got == x, "host message got %d", got);
        STEP();
        rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    } else if (rank == 1) {
        STEP();
        rc = MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        STEP();
        MPI_Send(&x, 1, MPI_INT, 0, 16, MPI_COMM_WORLD);
        STEP();
        int rc2 = MPI_Wait(&q[1], MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS) rc = rc2;
    } else {
        STEP();
        rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    }
    CHECK(rc == MPI_SUCCESS, "crossing completion returned %d", rc);
    nb_check_free(&b, 2, "2 Iallreduce crossing a host Send/Recv");
    /* crossing: rank 0 enters a blocking collective on another communicator (under
     * NCCLMPI_AGREE it starts with a route vote there) while its peers wait for the two
     * (c's NCCL communicator made first, so that the second is queued) */
    dev_allreduce_check(c, 256, 9, "a blocking Allreduce on the communicator of the queue");
    b = nb_new(2, n, 40);
    nb_start(&b, 0, c, &q[0]);
    nb_start(&b, 1, c, &q[1]);
    if (rank == 0) {
        dev_allreduce_check(MPI_COMM_WORLD, 512, 5, "blocking Allreduce on another communicator with two queued");
        STEP();
        rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    } else {
        STEP();
        rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        dev_allreduce_check(MPI_COMM_WORLD, 512, 5, "blocking Allreduce after the Waitall");
    }
    CHECK(rc == MPI_SUCCESS, "Waitall crossing a blocking collective returned %d", rc);
    nb_check_free(&b, 2, "2 Iallreduce crossing a blocking collective");
    /* 64 at once */
    b = nb_new(64, n, 100);
    for (int k = 0; k < 64; k++) nb_start(&b, k, c, &q[k]);
    STEP();
    rc = MPI_Waitall(64, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall(64) returned %d", rc);
    nb_check_free(&b, 64, "64 Iallreduce + Waitall");
    STEP();
    MPI_Comm_free(&c);
}

/* ---------------------------------------------------------------------------------------- */
/* 17. explicit_group                                                                       */

static void sc_explicit_group(void)
{
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    if (!gbegin || !gend) {
        if (rank == 0) printf("gpu_hazard explicit_group: note: ncclmpi_group_begin/end not found, used as no-ops\n");
        gbegin = gend = NULL;
    }
    MPI_Comm A = fresh_dup(), B = fresh_dup();
    const int n = 1024;
    nbset_t b = nb_new(16, n, 0);
    MPI_Request q[16];
    int rc;
    if (gbegin) CHECK((rc = gbegin()) == 0, "ncclmpi_group_begin returned %d", rc);
    for (int k = 0; k < 16; k++) nb_start(&b, k, k % 2 ? B : A, &q[k]);
    if (gend) CHECK((rc = gend()) == 0, "ncclmpi_group_end returned %d", rc);
    STEP();
    rc = MPI_Waitall(16, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall returned %d", rc);
    nb_check_free(&b, 16, "16 Iallreduce on two dups in one explicit group");
    /* the same with the two communicators first met in opposite orders: odd ranks issue each
     * pair B-first (each communicator still sees its calls in one order on every rank), so the
     * group's communicators launch in opposite orders on neighbouring ranks */
    b = nb_new(16, n, 3);
    if (gbegin) CHECK((rc = gbegin()) == 0, "ncclmpi_group_begin returned %d", rc);
    for (int j = 0; j < 16; j++) {
        const int k = rank % 2 ? j ^ 1 : j;
        nb_start(&b, k, k % 2 ? B : A, &q[k]);
    }
    if (gend) CHECK((rc = gend()) == 0, "ncclmpi_group_end returned %d", rc);
    STEP();
    rc = MPI_Waitall(16, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall (crossing group) returned %d", rc);
    nb_check_free(&b, 16, "16 Iallreduce on two dups met in opposite orders in one explicit group");
    if (gbegin) CHECK((rc = gbegin()) == 0, "empty group: ncclmpi_group_begin returned %d", rc);
    if (gend) CHECK((rc = gend()) == 0, "empty group: ncclmpi_group_end returned %d", rc);
    dev_allreduce_check(A, 100, 4, "Allreduce after an empty group");
    dev_allreduce_check(B, 100, 6, "Allreduce after an empty group");
    STEP();
    MPI_Comm_free(&A);
    STEP();
    MPI_Comm_free(&B);
}

/* ---------------------------------------------------------------------------------------- */
/* 17b. field_range: the range of many fields, each field's MIN and MAX issued back to back     */

/* The data of the group scenarios (field_range, group_mix): type t 0 int, 1 double, 2 unsigned
 * char; op o 0 sum, 1 max, 2 min. */
static size_t gm_es(int t) { return t == 0 ? sizeof(int) : t == 1 ? sizeof(double) : 1; }
static MPI_Datatype gm_type(int t) { return t == 0 ? MPI_INT : t == 1 ? MPI_DOUBLE : MPI_UNSIGNED_CHAR; }
static MPI_Op gm_op(int o) { return o == 0 ? MPI_SUM : o == 1 ? MPI_MAX : MPI_MIN; }
/* element j of operation k's data on rank q: small integers, exact in every type and sum */
static double gm_val(int k, long j, int q) { return (double)((7 * k + 3 * j + 11 * q) % 53 + 1); }
static void gm_put(int t, void *p, long i, double v)
{
    if (t == 0) ((int *)p)[i] = (int)v;
    else if (t == 1) ((double *)p)[i] = v / 2;
    else ((unsigned char *)p)[i] = (unsigned char)v;
}
static double gm_red(int o, int k, long j)
{
    double a = gm_val(k, j, 0);
    for (int q = 1; q < size; q++) {
        const double v = gm_val(k, j, q);
        a = o == 0 ? a + v : o == 1 ? (v > a ? v : a) : (v < a ? v : a);
    }
    return a;
}

/* 32 fields (int and double alternating, 4096-19968 elements), each field's MPI_Iallreduce(MIN)
 * and MPI_Iallreduce(MAX) back to back, then one Waitall: 64 operations that coalesce (and, in
 * the explicit-group rounds, one explicit group), MAX and MIN reductions of one type together.
 * NCCL 2.19-2.28 give wrong results for such an NCCL group on 3 ranks or more (design.md, "A MAX
 * and a MIN reduction"), so this fails wherever ncclmpi hands NCCL both in one group. */
static void sc_field_range(void)
{
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    enum { F = 32 };
    MPI_Comm c = fresh_dup();
    /* its NCCL communicator is made at its first blocking device collective (nonblocking calls
     * before that one run staged) */
    dev_allreduce_check(c, 100, 1, "the first, blocking Allreduce");
    gbuf_t src[F], lo[F], hi[F];
    void *wlo[F], *whi[F];
    int n[F];
    for (int f = 0; f < F; f++) {
        n[f] = 4096 + 512 * f;
        const size_t es = gm_es(f % 2);
        unsigned char *h = malloc(n[f] * es);
        wlo[f] = malloc(n[f] * es);
        whi[f] = malloc(n[f] * es);
        for (int j = 0; j < n[f]; j++) {
            gm_put(f % 2, h, j, gm_val(f, j, rank));
            gm_put(f % 2, wlo[f], j, gm_red(2, f, j));
            gm_put(f % 2, whi[f], j, gm_red(1, f, j));
        }
        src[f] = gb_dev_from(h, n[f] * es);
        lo[f] = gb_dev(n[f] * es);
        hi[f] = gb_dev(n[f] * es);
        free(h);
    }
    MPI_Request q[2 * F];
    for (int round = 0; round < 4; round++) {
        const int group = round % 2 && gbegin && gend;
        const char *how = group ? "in an explicit group" : "back to back";
        for (int f = 0; f < F; f++) {
            gb_poison(&lo[f]);
            gb_poison(&hi[f]);
        }
        STEP();
        int rc;
        if (group) CHECK((rc = gbegin()) == 0, "ncclmpi_group_begin returned %d", rc);
        for (int f = 0; f < F; f++) {
            const MPI_Datatype t = gm_type(f % 2);
            rc = MPI_Iallreduce(src[f].p, lo[f].p, n[f], t, MPI_MIN, c, &q[2 * f]);
            CHECK(rc == MPI_SUCCESS, "round %d: Iallreduce(MIN) of field %d returned %d", round, f, rc);
            rc = MPI_Iallreduce(src[f].p, hi[f].p, n[f], t, MPI_MAX, c, &q[2 * f + 1]);
            CHECK(rc == MPI_SUCCESS, "round %d: Iallreduce(MAX) of field %d returned %d", round, f, rc);
        }
        if (group) CHECK((rc = gend()) == 0, "ncclmpi_group_end returned %d", rc);
        rc = MPI_Waitall(2 * F, q, MPI_STATUSES_IGNORE);
        CHECK(rc == MPI_SUCCESS, "round %d: Waitall returned %d", round, rc);
        STEP();
        for (int f = 0; f < F; f++) {
            char what[96];
            const size_t es = gm_es(f % 2);
            snprintf(what, sizeof(what), "round %d (%s): field %d's MIN", round, how, f);
            gb_expect(&lo[f], wlo[f], es, what);
            snprintf(what, sizeof(what), "round %d (%s): field %d's MAX", round, how, f);
            gb_expect(&hi[f], whi[f], es, what);
        }
    }
    for (int f = 0; f < F; f++) {
        gb_free_all(&src[f], &lo[f], &hi[f], NULL);
        free(wlo[f]);
        free(whi[f]);
    }
    STEP();
    MPI_Comm_free(&c);
}

/* ---------------------------------------------------------------------------------------- */
/* 18. fault, fault_nb: an injected NCCL failure (NCCLMPI_FAULT=0:20) surfaces as an error return  */

/* nb: MPI_Iallreduce + MPI_Wait, so the failure reaches the rank after the call returned, in the
 * Wait, which must report it through the communicator's handler (MPI_ERRORS_RETURN) */
static void fault_run(int nb)
{
    const char *call = nb ? "Iallreduce + Wait" : "Allreduce";
    MPI_Comm c = fresh_dup();
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    const int n = 1024;
    float *h = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) {
        h[i] = (float)(rank + i % 100);
        want[i] = (float)(size * (size - 1) / 2 + size * (i % 100));
    }
    gbuf_t s = gb_dev_from(h, n * sizeof(float)), r = gb_dev(n * sizeof(float));
    int first = -1, rc = MPI_SUCCESS;
    /* the communicator's NCCL communicator is made at its first blocking collective (nonblocking
     * calls before that one run staged, with no NCCL launch to fail): one blocking call first, the
     * first of the 20 launches */
    STEP();
    rc = MPI_Allreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, c);
    CHECK(rc == MPI_SUCCESS, "the first %s (launch 1) returned %d", "Allreduce", rc);
    gb_expect(&r, want, 4, "the first Allreduce");
    double t0 = MPI_Wtime(), terr = 0;
    for (int it = 0; it < 200 && rc == MPI_SUCCESS; it++) {
        gb_poison(&r); /* a call that returns success without doing its work is seen */
        STEP();
        if (nb) {
            MPI_Request q;
            MPI_Status st;
            st.MPI_ERROR = -12345;
            rc = MPI_Iallreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, c, &q);
            if (rc == MPI_SUCCESS) {
                rc = MPI_Wait(&q, &st);
                CHECK(rc == MPI_SUCCESS || st.MPI_ERROR == rc, "MPI_Wait returned %d, status MPI_ERROR %d", rc, st.MPI_ERROR);
                CHECK(q == MPI_REQUEST_NULL, "MPI_Wait left the request set");
            }
        } else {
            rc = MPI_Allreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, c);
        }
        if (rc != MPI_SUCCESS) {
            first = it;
            terr = MPI_Wtime() - t0;
            break;
        }
        char what[64];
        snprintf(what, sizeof(what), "%s %d before the fault", call, it);
        gb_expect(&r, want, 4, what);
    }
    if (first < 0) {
        CHECK(0, "no error return in 200 device %s (is NCCLMPI_FAULT=0:20 set?)", call);
    } else {
        int cls = -1, len = 0;
        char msg[MPI_MAX_ERROR_STRING] = "";
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, msg, &len);
        printf("gpu_hazard fault: rank %d: %s %d failed after %.1f s: class %d: %s\n", rank, call, first, terr, cls, msg);
        CHECK(cls == MPI_ERR_OTHER, "error class %d, want MPI_ERR_OTHER (%d)", cls, MPI_ERR_OTHER);
        CHECK(strstr(msg, "ncclmpi") != NULL, "error string does not name ncclmpi: \"%s\"", msg);
        STEP();
        int rc2 = MPI_Allreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, c);
        int cls2 = -1;
        MPI_Error_class(rc2, &cls2);
        len = 0;
        MPI_Error_string(rc2, msg, &len);
        printf("gpu_hazard fault: rank %d: next call on the failed communicator: class %d: %s\n", rank, cls2,
               rc2 ? msg : "MPI_SUCCESS");
        CHECK(rc2 != MPI_SUCCESS, "the call after the failure succeeded: the communicator must stay failed");
    }
    fflush(stdout);
    gb_free(&s);
    gb_free(&r);
    free(h);
    free(want);
}

static void sc_fault(void) { fault_run(0); }
static void sc_fault_nb(void) { fault_run(1); }

/* ---------------------------------------------------------------------------------------- */
/* 19. kill: rank 1 dies; survivors must get an error return (NCCLMPI_TIMEOUT)              */

static void sc_kill(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int n = 1024;
    float *h = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(rank + i);
    gbuf_t s = gb_dev_from(h, n * sizeof(float)), r = gb_dev(n * sizeof(float));
    for (int it = 0; it < 10000; it++) {
        if (rank == 1 && it == 50) {
            printf("gpu_hazard kill: rank 1 raising SIGKILL at %.3f\n", now_s());
            fflush(stdout);
            raise(SIGKILL);
        }
        STEP();
        int rc = MPI_Allreduce(s.p, r.p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            double t = now_s();
            char msg[MPI_MAX_ERROR_STRING] = "";
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            printf("gpu_hazard kill: rank %d got error: %s\n", rank, msg);
            printf("gpu_hazard kill: rank %d error at %.3f (call %d)\n", rank, t, it);
            fflush(stdout);
            fflush(stderr);
            _exit(0); /* a peer is gone: no MPI_Finalize */
        }
    }
    printf("gpu_hazard kill: rank %d FAIL: 10000 calls without an error\n", rank);
    fflush(stdout);
    _exit(1);
}

/* ---------------------------------------------------------------------------------------- */
/* 20. fuzz: bad arguments on device buffers get the error class they get on host buffers  */

enum { FZ_ALLREDUCE, FZ_REDUCE, FZ_BCAST, FZ_ALLGATHER, FZ_ALLTOALL, FZ_GATHER, FZ_SCATTER, FZ_NCOLL };
enum { FD_COMM_NULL, FD_TYPE_NULL, FD_OP_NULL, FD_ROOT_SIZE, FD_ROOT_NEG, FD_COUNT_NEG, FD_ALIAS, FD_NDEF };
static const char *fz_cname[] = {"Allreduce", "Reduce", "Bcast", "Allgather", "Alltoall", "Gather", "Scatter"};
static const char *fz_dname[] = {"MPI_COMM_NULL", "MPI_DATATYPE_NULL", "MPI_OP_NULL",     "root=size",
                                 "root=-2",       "count=-1",          "sendbuf==recvbuf"};

/* Defects the host MPI reports on every rank (so no rank enters the collective). Open MPI 4.1
 * crashes on MPI_Allgather(..., MPI_COMM_NULL) and checks aliasing only in MPI_Allreduce (and in
 * MPI_Reduce at the root alone), so those are left out. */
static int fz_applies(int c, int d)
{
    int reduction = c == FZ_ALLREDUCE || c == FZ_REDUCE;
    int rooted = c == FZ_REDUCE || c == FZ_BCAST || c == FZ_GATHER || c == FZ_SCATTER;
    switch (d) {
        case FD_COMM_NULL:
            return c != FZ_ALLGATHER;
        case FD_OP_NULL:
            return reduction;
        case FD_ROOT_SIZE:
        case FD_ROOT_NEG:
            return rooted;
        case FD_ALIAS:
            return c == FZ_ALLREDUCE;
        default:
            return 1;
    }
}

static int fz_call(int c, int d, void *s, void *r)
{
    MPI_Comm comm = d == FD_COMM_NULL ? MPI_COMM_NULL : MPI_COMM_WORLD;
    MPI_Datatype t = d == FD_TYPE_NULL ? MPI_DATATYPE_NULL : MPI_INT;
    MPI_Op op = d == FD_OP_NULL ? MPI_OP_NULL : MPI_SUM;
    int root = d == FD_ROOT_SIZE ? size : d == FD_ROOT_NEG ? -2 : 0;
    int n = d == FD_COUNT_NEG ? -1 : 16;
    if (d == FD_ALIAS) r = s;
    STEP();
    switch (c) {
        case FZ_ALLREDUCE:
            return MPI_Allreduce(s, r, n, t, op, comm);
        case FZ_REDUCE:
            return MPI_Reduce(s, r, n, t, op, root, comm);
        case FZ_BCAST:
            return MPI_Bcast(s, n, t, root, comm);
        case FZ_ALLGATHER:
            return MPI_Allgather(s, n, t, r, n, t, comm);
        case FZ_ALLTOALL:
            return MPI_Alltoall(s, n, t, r, n, t, comm);
        case FZ_GATHER:
            return MPI_Gather(s, n, t, r, n, t, root, comm);
        default:
            return MPI_Scatter(s, n, t, r, n, t, root, comm);
    }
}

static unsigned long long splitmix64(unsigned long long *x)
{
    unsigned long long z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void sc_fuzz(int argc, char **argv)
{
    unsigned seed = argc > 0 ? (unsigned)strtoul(argv[0], NULL, 10) : 1u;
    unsigned long long st = seed;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const size_t nb = (size_t)16 * size * sizeof(int);
    int *src = malloc(nb);
    for (size_t i = 0; i < nb / sizeof(int); i++) src[i] = (int)i * 5 + rank + 1;
    const int cases = 60;
    int done = 0, tally[FD_NDEF] = {0};
    for (int k = 0; k < cases; k++) {
        int c, d;
        /* a defect, then a collective it applies to: the same sequence on every rank */
        d = (int)(splitmix64(&st) % FD_NDEF);
        do c = (int)(splitmix64(&st) % FZ_NCOLL);
        while (!fz_applies(c, d));
        char what[128];
        snprintf(what, sizeof(what), "case %d: MPI_%s with %s", k, fz_cname[c], fz_dname[d]);
        /* reference: host buffers */
        gbuf_t hs = gb_new(MK_MALLOC, nb), hr = gb_new(MK_MALLOC, nb);
        gb_put(&hs, src);
        int hrc = fz_call(c, d, hs.p, hr.p), hcls = -1;
        MPI_Error_class(hrc, &hcls);
        CHECK(hrc != MPI_SUCCESS, "%s: host reference call succeeded", what);
        unsigned char *img = gb_image(&hr);
        guards_ok(img, nb, what);
        free(img);
        gb_free(&hs);
        gb_free(&hr);
        /* device buffers */
        gbuf_t ds = gb_dev_from(src, nb), dr = gb_dev(nb);
        int drc = fz_call(c, d, ds.p, dr.p), dcls = -1;
        MPI_Error_class(drc, &dcls);
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        if (drc != MPI_SUCCESS) MPI_Error_string(drc, msg, &len);
        CHECK(drc != MPI_SUCCESS && dcls == hcls, "%s: device call returned class %d (%s), host reference class %d",
              what, dcls, msg, hcls);
        img = gb_image(&dr);
        guards_ok(img, nb, what);
        free(img);
        img = gb_image(&ds);
        guards_ok(img, nb, what);
        free(img);
        gb_free(&ds);
        gb_free(&dr);
        tally[d]++;
        done++;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (rank == 0) {
        printf("gpu_hazard fuzz: seed %u: %d cases (", seed, done);
        for (int d = 0; d < FD_NDEF; d++) printf("%s%s %d", d ? ", " : "", fz_dname[d], tally[d]);
        printf("), errors compared against the host reference\n");
    }
    free(src);
}

/* ---------------------------------------------------------------------------------------- */
/* 20b. group_mix: random nonblocking collectives of every kind in coalesced and explicit groups */

/* Rounds of 24 nonblocking collectives drawn from one seed (the same on every rank): allreduce,
 * reduce, bcast, allgather, alltoall, reduce_scatter_block, gather, scatter; int, double and
 * unsigned char; sum, max and min (no byte sums: they wrap); random roots and counts. Odd rounds
 * inside ncclmpi_group_begin/end, even ones back to back (coalesced). Every receive buffer is
 * poisoned and checked byte for byte, the bytes MPI must not write included (a non-root's receive
 * buffer of a reduce or gather). What a launched group's sharing of NCCL calls, the MAX/MIN
 * ordering and the agreed groups may get wrong shows here. */
enum { GM_ALLREDUCE, GM_REDUCE, GM_BCAST, GM_ALLGATHER, GM_ALLTOALL, GM_RSB, GM_GATHER, GM_SCATTER, GM_NKIND };
static const char *const gm_name[] = {"Iallreduce", "Ireduce", "Ibcast", "Iallgather", "Ialltoall",
                                      "Ireduce_scatter_block", "Igather", "Iscatter"};
static const char *const gm_tname[] = {"int", "double", "unsigned char"};
static const char *const gm_oname[] = {"sum", "max", "min"};

typedef struct {
    int kind, t, o, root;
    long n;         /* elements per block */
    gbuf_t s, r;    /* s unused by bcast (in place in r) */
    int has_s;
    void *want;     /* r's bytes after the call */
} gm_t;

static void gm_setup(gm_t *g, int k, unsigned long long *st)
{
    g->kind = (int)(splitmix64(st) % GM_NKIND);
    g->t = (int)(splitmix64(st) % 3);
    g->o = (int)(splitmix64(st) % 3);
    if (g->t == 2 && g->o == 0) g->o = 1;
    g->root = (int)(splitmix64(st) % (unsigned)size);
    g->n = 1 + (long)(splitmix64(st) % 3000);
    const size_t es = gm_es(g->t);
    const long n = g->n, P = size;
    long sn = n, rn = n; /* elements of the send and receive buffers */
    switch (g->kind) {
    case GM_ALLGATHER: rn = n * P; break;
    case GM_ALLTOALL: sn = rn = n * P; break;
    case GM_RSB: sn = n * P; break;
    case GM_GATHER: rn = n * P; break;
    case GM_SCATTER: sn = n * P; break;
    default: break;
    }
    unsigned char *h = malloc(sn * es);
    g->want = poisoned(rn * es);
    const int at_root = rank == g->root;
    for (long i = 0; i < sn; i++) gm_put(g->t, h, i, gm_val(k, i, rank));
    switch (g->kind) {
    case GM_ALLREDUCE:
        for (long j = 0; j < n; j++) gm_put(g->t, g->want, j, gm_red(g->o, k, j));
        break;
    case GM_REDUCE:
        if (at_root)
            for (long j = 0; j < n; j++) gm_put(g->t, g->want, j, gm_red(g->o, k, j));
        break;
    case GM_BCAST:
        for (long j = 0; j < n; j++) gm_put(g->t, g->want, j, gm_val(k, j, g->root));
        break;
    case GM_ALLGATHER:
        for (long q = 0; q < P; q++)
            for (long j = 0; j < n; j++) gm_put(g->t, g->want, q * n + j, gm_val(k, j, (int)q));
        break;
    case GM_ALLTOALL: /* block q of rank q's send buffer: its elements q*n + j */
        for (long q = 0; q < P; q++)
            for (long j = 0; j < n; j++) gm_put(g->t, g->want, q * n + j, gm_val(k, rank * n + j, (int)q));
        break;
    case GM_RSB:
        for (long j = 0; j < n; j++) gm_put(g->t, g->want, j, gm_red(g->o, k, rank * n + j));
        break;
    case GM_GATHER:
        if (at_root)
            for (long q = 0; q < P; q++)
                for (long j = 0; j < n; j++) gm_put(g->t, g->want, q * n + j, gm_val(k, j, (int)q));
        break;
    case GM_SCATTER:
        for (long j = 0; j < n; j++) gm_put(g->t, g->want, j, gm_val(k, rank * n + j, g->root));
        break;
    }
    g->has_s = g->kind != GM_BCAST;
    if (g->has_s) g->s = gb_dev_from(h, sn * es);
    if (g->kind == GM_BCAST) {
        g->r = gb_dev_from(h, n * es); /* in place: the root's data, the others' to be replaced */
    } else {
        g->r = gb_dev(rn * es);
    }
    free(h);
}

static int gm_start(gm_t *g, MPI_Comm c, MPI_Request *q)
{
    const MPI_Datatype dt = gm_type(g->t);
    const int n = (int)g->n;
    switch (g->kind) {
    case GM_ALLREDUCE: return MPI_Iallreduce(g->s.p, g->r.p, n, dt, gm_op(g->o), c, q);
    case GM_REDUCE: return MPI_Ireduce(g->s.p, g->r.p, n, dt, gm_op(g->o), g->root, c, q);
    case GM_BCAST: return MPI_Ibcast(g->r.p, n, dt, g->root, c, q);
    case GM_ALLGATHER: return MPI_Iallgather(g->s.p, n, dt, g->r.p, n, dt, c, q);
    case GM_ALLTOALL: return MPI_Ialltoall(g->s.p, n, dt, g->r.p, n, dt, c, q);
    case GM_RSB: return MPI_Ireduce_scatter_block(g->s.p, g->r.p, n, dt, gm_op(g->o), c, q);
    case GM_GATHER: return MPI_Igather(g->s.p, n, dt, g->r.p, n, dt, g->root, c, q);
    default: return MPI_Iscatter(g->s.p, n, dt, g->r.p, n, dt, g->root, c, q);
    }
}

static void sc_group_mix(int argc, char **argv)
{
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    unsigned long long st = argc > 0 ? strtoull(argv[0], NULL, 10) : 7ull;
    enum { K = 24, ROUNDS = 8 };
    MPI_Comm c = fresh_dup();
    dev_allreduce_check(c, 100, 2, "the first, blocking Allreduce (the NCCL communicator is made there)");
    gm_t g[K];
    MPI_Request q[K];
    for (int round = 0; round < ROUNDS; round++) {
        const int group = round % 2 && gbegin && gend;
        for (int k = 0; k < K; k++) gm_setup(&g[k], round * K + k, &st);
        STEP();
        int rc;
        if (group) CHECK((rc = gbegin()) == 0, "ncclmpi_group_begin returned %d", rc);
        for (int k = 0; k < K; k++) {
            rc = gm_start(&g[k], c, &q[k]);
            CHECK(rc == MPI_SUCCESS, "round %d op %d: MPI_%s returned %d", round, k, gm_name[g[k].kind], rc);
        }
        if (group) CHECK((rc = gend()) == 0, "ncclmpi_group_end returned %d", rc);
        rc = MPI_Waitall(K, q, MPI_STATUSES_IGNORE);
        CHECK(rc == MPI_SUCCESS, "round %d: Waitall returned %d", round, rc);
        STEP();
        for (int k = 0; k < K; k++) {
            char what[160];
            snprintf(what, sizeof(what), "round %d (%s) op %d: MPI_%s %s%s%s x %ld, root %d", round,
                     group ? "explicit group" : "back to back", k, gm_name[g[k].kind], gm_tname[g[k].t],
                     g[k].kind == GM_ALLREDUCE || g[k].kind == GM_REDUCE || g[k].kind == GM_RSB ? " " : "",
                     g[k].kind == GM_ALLREDUCE || g[k].kind == GM_REDUCE || g[k].kind == GM_RSB ? gm_oname[g[k].o] : "",
                     g[k].n, g[k].root);
            gb_expect(&g[k].r, g[k].want, gm_es(g[k].t), what);
            if (g[k].has_s) gb_free(&g[k].s);
            gb_free(&g[k].r);
            free(g[k].want);
        }
    }
    STEP();
    MPI_Comm_free(&c);
}

/* ---------------------------------------------------------------------------------------- */
/* 22. envelope_order: nonblocking device sends whose envelopes wait for the next flush      */
/* (NCCLMPI_P2P_ENVELOPE=device queues them), met by calls in crossing orders                  */

static int pval(int from, int msg, int i) { return from * 1000003 + msg * 7919 + i; }

/* a device buffer of n ints from rank `from`'s message msg */
static gbuf_t pbuf(int from, int msg, int n)
{
    int *h = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) h[i] = pval(from, msg, i);
    gbuf_t g = gb_dev_from(h, (size_t)n * sizeof(int));
    free(h);
    return g;
}

static void precv_check(int from, int msg, int n, int tag, const char *what)
{
    gbuf_t r = gb_dev((size_t)n * sizeof(int));
    int *want = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) want[i] = pval(from, msg, i);
    MPI_Status st;
    STEP();
    int rc = MPI_Recv(r.p, n, MPI_INT, from, tag, MPI_COMM_WORLD, &st), cnt = -1;
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(rc == MPI_SUCCESS && cnt == n, "%s: Recv returned %d, count %d (want %d)", what, rc, cnt, n);
    gb_expect(&r, want, sizeof(int), what);
    gb_free(&r);
    free(want);
}

/* Holds the legacy default stream (cuStreamWaitValue32 on a host-mapped word) until released
 * or until limit_s passes; the release by the timer counts as a failure of what it waited for. */
typedef CUresult (*wait_value_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef struct {
    volatile unsigned *word;
    volatile int done;
    volatile int timed_out;
    int limit_s;
    pthread_t waiter;  /* the thread whose MPI call the hold must not delay */
} blocker_t;

/* SIGUSR2 on the waiting thread: where it waits, on stderr (a failure's evidence: the call that
 * waited for the held stream; addresses in a library resolve with addr2line -e LIB OFFSET) */
static volatile int stack_dumped;
static void dump_stack(int sig)
{
    (void)sig;
    void *pc[48];
    const int n = backtrace(pc, 48);
    static const char head[] = "gpu_hazard: the waiting thread's stack when the legacy stream's hold timed out:\n";
    if (write(2, head, sizeof(head) - 1) < 0) {}
    backtrace_symbols_fd(pc, n, 2);
    stack_dumped = 1;
}

static void *blocker_timer(void *arg)
{
    blocker_t *b = arg;
    for (int i = 0; i < b->limit_s * 100 && !b->done; i++) usleep(10000);
    if (!b->done) {
        b->timed_out = 1;
        stack_dumped = 0;
        if (pthread_kill(b->waiter, SIGUSR2) == 0)
            for (int i = 0; i < 200 && !stack_dumped; i++) usleep(10000);
        *b->word = 1;  /* let the stream go, so that the test ends with a failure, not a hang */
    }
    return NULL;
}

/* 1 when the legacy stream is now held (a GPU with stream memory operations) */
static int legacy_hold(blocker_t *b, pthread_t *timer)
{
    static wait_value_fn wait_value;
    static unsigned *word;
    static CUdeviceptr dword;
    if (!wait_value) {
        void *warm[1];
        backtrace(warm, 1);  /* (loads what backtrace needs now, not inside the signal handler) */
        signal(SIGUSR2, dump_stack);
        enum cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn)
            return 0;
        CUDACHECK(cudaHostAlloc((void **)&word, sizeof(unsigned), cudaHostAllocMapped));
        void *dp = NULL;
        CUDACHECK(cudaHostGetDevicePointer(&dp, word, 0));
        dword = (CUdeviceptr)(uintptr_t)dp;
        wait_value = (wait_value_fn)fn;
    }
    *word = 0;
    b->word = word;
    b->done = 0;
    b->timed_out = 0;
    b->limit_s = 20;
    b->waiter = pthread_self();
    if (wait_value(CU_STREAM_LEGACY, dword, 1, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) return 0;
    pthread_create(timer, NULL, blocker_timer, b);
    return 1;
}

static void legacy_release(blocker_t *b, pthread_t timer)
{
    b->done = 1;
    *b->word = 1;
    pthread_join(timer, NULL);
    CUDACHECK(cudaDeviceSynchronize());
}

static void sc_envelope_order(void)
{
    const int BIG = 256 << 10, MID = 64 << 10, TAG = 31;  /* ints: 1 MiB, 256 KiB; 8-byte messages */
    if (rank < 2) {
        const int peer = 1 - rank;
        /* 1. the same destination and tag: large (queued), small (staged at once), large again:
         *    the small one must not overtake the first */
        if (rank == 0) {
            gbuf_t a = pbuf(0, 1, BIG), b = pbuf(0, 2, 2), c = pbuf(0, 3, MID);
            MPI_Request q[3];
            STEP();
            MPI_Isend(a.p, BIG, MPI_INT, 1, TAG, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(b.p, 2, MPI_INT, 1, TAG, MPI_COMM_WORLD, &q[1]);
            MPI_Isend(c.p, MID, MPI_INT, 1, TAG, MPI_COMM_WORLD, &q[2]);
            int rc = MPI_Waitall(3, q, MPI_STATUSES_IGNORE);
            CHECK(rc == MPI_SUCCESS, "Waitall of three sends returned %d", rc);
            gb_free_all(&a, &b, &c, (gbuf_t *)NULL);
        } else {
            precv_check(0, 1, BIG, TAG, "1st of three messages with one tag");
            precv_check(0, 2, 2, TAG, "2nd (small) of three messages with one tag");
            precv_check(0, 3, MID, TAG, "3rd of three messages with one tag");
        }
        /* 2. a blocking host receive right after a queued send; the peer sends its host message
         *    only once it has the device one */
        int x = 0;
        if (rank == 0) {
            gbuf_t a = pbuf(0, 4, BIG);
            MPI_Request q;
            STEP();
            MPI_Isend(a.p, BIG, MPI_INT, 1, TAG + 1, MPI_COMM_WORLD, &q);
            MPI_Recv(&x, 1, MPI_INT, 1, TAG + 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(x == 4242, "host message after a queued send: %d", x);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            gb_free(&a);
        } else {
            precv_check(0, 4, BIG, TAG + 1, "device message before the host reply");
            x = 4242;
            MPI_Send(&x, 1, MPI_INT, 0, TAG + 2, MPI_COMM_WORLD);
        }
        /* 3. a Test loop on a queued send */
        if (rank == 0) {
            gbuf_t a = pbuf(0, 5, MID);
            MPI_Request q;
            int done = 0;
            STEP();
            MPI_Isend(a.p, MID, MPI_INT, 1, TAG + 3, MPI_COMM_WORLD, &q);
            while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
            gb_free(&a);
        } else {
            precv_check(0, 5, MID, TAG + 3, "device message completed by a Test loop");
        }
        /* 4. both ways at once: Irecv, Isend, Isend, Waitall (the receives do not flush) */
        {
            gbuf_t s1 = pbuf(rank, 6, MID), s2 = pbuf(rank, 7, BIG);
            gbuf_t r1 = gb_dev((size_t)MID * sizeof(int)), r2 = gb_dev((size_t)BIG * sizeof(int));
            int *w1 = malloc((size_t)MID * sizeof(int)), *w2 = malloc((size_t)BIG * sizeof(int));
            for (int i = 0; i < MID; i++) w1[i] = pval(peer, 6, i);
            for (int i = 0; i < BIG; i++) w2[i] = pval(peer, 7, i);
            MPI_Request q[4];
            STEP();
            MPI_Irecv(r1.p, MID, MPI_INT, peer, TAG + 4, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(s1.p, MID, MPI_INT, peer, TAG + 4, MPI_COMM_WORLD, &q[1]);
            MPI_Irecv(r2.p, BIG, MPI_INT, peer, TAG + 5, MPI_COMM_WORLD, &q[2]);
            MPI_Isend(s2.p, BIG, MPI_INT, peer, TAG + 5, MPI_COMM_WORLD, &q[3]);
            int rc = MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
            CHECK(rc == MPI_SUCCESS, "exchange Waitall returned %d", rc);
            gb_expect(&r1, w1, sizeof(int), "exchange, first message");
            gb_expect(&r2, w2, sizeof(int), "exchange, second message");
            gb_free_all(&s1, &s2, &r1, &r2, (gbuf_t *)NULL);
            free(w1);
            free(w2);
        }
        /* 4b. a burst of more sends than one copy-kernel launch takes (16), both ways, each send
         *     buffer filled by an asynchronous copy on the legacy stream just before its Isend
         *     (the payload copies must follow it), some send and receive buffers 4 bytes off
         *     16-byte alignment (copied one by one), one Waitall; then the same with small messages
         *     (staged: the later sends' copies to the host run by one copy-kernel launch) */
        for (int small = 0; small < 2; small++) {
            enum { NB = 20 };
            gbuf_t sb[NB], rb[NB], src[NB];
            MPI_Request q[2 * NB];
            int *want[NB];
            for (int k = 0; k < NB; k++) {
                const int n = small ? 1 + 61 * k : 2048 + 1000 * k;
                src[k] = pbuf(rank, 20 + k, n);
                sb[k] = gb_dev((size_t)(n + 1) * sizeof(int));
                rb[k] = gb_dev((size_t)(n + 1) * sizeof(int));
                want[k] = malloc((size_t)n * sizeof(int));
                for (int i = 0; i < n; i++) want[k][i] = pval(peer, 20 + k, i);
            }
            STEP();
            for (int k = 0; k < NB; k++) {
                const int n = small ? 1 + 61 * k : 2048 + 1000 * k, rskew = k % 6 == 1 ? 1 : 0;
                MPI_Irecv((int *)rb[k].p + rskew, n, MPI_INT, peer, TAG + 10 + k, MPI_COMM_WORLD, &q[k]);
            }
            for (int k = 0; k < NB; k++) {
                const int n = small ? 1 + 61 * k : 2048 + 1000 * k, skew = k % 7 == 5 ? 1 : 0;
                int *to = (int *)sb[k].p + skew;
                if (host_mode) memcpy(to, src[k].p, (size_t)n * sizeof(int));
                else CUDACHECK(cudaMemcpyAsync(to, src[k].p, (size_t)n * sizeof(int), cudaMemcpyDeviceToDevice, 0));
                MPI_Isend(to, n, MPI_INT, peer, TAG + 10 + k, MPI_COMM_WORLD, &q[NB + k]);
            }
            int rc = MPI_Waitall(2 * NB, q, MPI_STATUSES_IGNORE);
            CHECK(rc == MPI_SUCCESS, "Waitall of %d receives and %d sends returned %d", NB, NB, rc);
            for (int k = 0; k < NB; k++) {
                const int n = small ? 1 + 61 * k : 2048 + 1000 * k, rskew = k % 6 == 1 ? 1 : 0;
                int *got = malloc((size_t)(n + 1) * sizeof(int));
                get_bytes(rb[k].kind, got, rb[k].p, (size_t)(n + 1) * sizeof(int));
                int bad = -1;
                for (int i = 0; i < n && bad < 0; i++)
                    if (got[rskew + i] != want[k][i]) bad = i;
                CHECK(bad < 0, "burst message %d of %d ints (%s): int %d is %d, want %d", k, n,
                      rskew ? "unaligned receive" : k % 7 == 5 ? "unaligned send" : "aligned", bad,
                      bad < 0 ? 0 : got[rskew + bad], bad < 0 ? 0 : want[k][bad]);
                free(got);
                free(want[k]);
                gb_free_all(&src[k], &sb[k], &rb[k], (gbuf_t *)NULL);
            }
        }
    }
    /* 4c. the legacy stream held by the application (work it queued after the calls, which waits
     *     for the host) while MPI_Waitall completes device sends and receives, some of them
     *     queued: their copies follow what was queued before each call, not what came after.
     *     Passes: payloads in a pool; staged ones; payloads received into device memory through a
     *     vector type (every other int) and into host memory (both pulled to the host first) */
    for (int pass = 0; pass < 4 && rank < 2 && !host_mode; pass++) {
        const int peer = 1 - rank, n = pass == 1 ? 3 : 16 << 10, strided = pass == 2, to_host = pass == 3;
        gbuf_t sb[3], rb[3];
        MPI_Request q[6];
        MPI_Datatype every_other;
        MPI_Type_vector(n, 1, 2, MPI_INT, &every_other);
        MPI_Type_commit(&every_other);
        for (int k = 0; k < 3; k++) {
            sb[k] = pbuf(rank, 60 + k, n);
            rb[k] = to_host ? gb_new(MK_MALLOC, (size_t)n * sizeof(int)) : gb_dev((size_t)(strided ? 2 : 1) * n * sizeof(int));
        }
        blocker_t b;
        pthread_t timer;
        STEP();
        for (int k = 0; k < 3; k++) {
            if (strided) MPI_Irecv(rb[k].p, 1, every_other, peer, TAG + 40 + k, MPI_COMM_WORLD, &q[k]);
            else MPI_Irecv(rb[k].p, n, MPI_INT, peer, TAG + 40 + k, MPI_COMM_WORLD, &q[k]);
        }
        for (int k = 0; k < 3; k++) MPI_Isend(sb[k].p, n, MPI_INT, peer, TAG + 40 + k, MPI_COMM_WORLD, &q[3 + k]);
        if (legacy_hold(&b, &timer)) {
            int rc = MPI_Waitall(6, q, MPI_STATUSES_IGNORE);
            const int waited_for_stream = b.timed_out;
            legacy_release(&b, timer);
            CHECK(rc == MPI_SUCCESS, "Waitall with the legacy stream held returned %d", rc);
            CHECK(!waited_for_stream, "MPI_Waitall waited for work the application queued on the legacy stream "
                                      "after its sends and receives (%s; released after %d s)",
                  strided ? "receives through a vector type" : to_host ? "receives into host memory" : pass ? "staged" : "envelopes",
                  b.limit_s);
            int *want = malloc((size_t)n * sizeof(int)), *got = malloc((size_t)2 * n * sizeof(int));
            for (int k = 0; k < 3; k++) {
                for (int i = 0; i < n; i++) want[i] = pval(peer, 60 + k, i);
                if (!strided) {
                    gb_expect(&rb[k], want, sizeof(int), "a message received while the legacy stream was held");
                    continue;
                }
                get_bytes(rb[k].kind, got, rb[k].p, (size_t)2 * n * sizeof(int));
                int bad = -1;
                for (int i = 0; i < n && bad < 0; i++)
                    if (got[2 * i] != want[i]) bad = i;
                CHECK(bad < 0, "a message received through a vector type while the legacy stream was held: int %d is %d, want %d",
                      bad, bad < 0 ? 0 : got[2 * bad], bad < 0 ? 0 : want[bad]);
            }
            free(want);
            free(got);
        } else {
            MPI_Waitall(6, q, MPI_STATUSES_IGNORE);  /* (no stream memory operations: nothing to check) */
        }
        MPI_Type_free(&every_other);
        for (int k = 0; k < 3; k++) gb_free_all(&sb[k], &rb[k], (gbuf_t *)NULL);
    }
    /* 4e. (device envelopes) a send buffer filled behind work that waits for the host (the legacy
     *     stream held): MPI_Test sends the envelope at once, without waiting for the payload's copy
     *     into the pool, which follows the fill, and the send is not complete; the receiver's copy
     *     waits for the sender's on the GPU and gets the filled data once the sender lets its
     *     stream go (staged sends wait for their copies to the host at the flush: not run) */
    const char *envm = getenv("NCCLMPI_P2P_ENVELOPE");
    if (rank < 2 && !host_mode && envm && !strcmp(envm, "device")) {
        const int n = 64 << 10;  /* 256 KiB */
        if (rank == 0) {
            gbuf_t src = pbuf(0, 80, n), sb = gb_dev((size_t)n * sizeof(int));
            blocker_t b;
            pthread_t timer;
            MPI_Request q = MPI_REQUEST_NULL;
            int flag = -1;
            STEP();
            if (legacy_hold(&b, &timer)) {
                CUDACHECK(cudaMemcpyAsync(sb.p, src.p, (size_t)n * sizeof(int), cudaMemcpyDeviceToDevice, 0));
                MPI_Isend(sb.p, n, MPI_INT, 1, TAG + 55, MPI_COMM_WORLD, &q);
                MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
                const int test_waited = b.timed_out;
                usleep(100000);  /* (the receiver meets the envelope meanwhile) */
                legacy_release(&b, timer);
                CHECK(!test_waited, "MPI_Test of a device send waited for the work queued before it on the legacy stream "
                                    "(released after %d s)", b.limit_s);
                CHECK(!flag, "a device send completed while its buffer's fill, queued before it, had not run");
            } else {  /* (no stream memory operations) */
                CUDACHECK(cudaMemcpy(sb.p, src.p, (size_t)n * sizeof(int), cudaMemcpyDeviceToDevice));
                MPI_Isend(sb.p, n, MPI_INT, 1, TAG + 55, MPI_COMM_WORLD, &q);
            }
            int rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
            CHECK(rc == MPI_SUCCESS, "Wait of a send filled behind the held legacy stream returned %d", rc);
            gb_free_all(&src, &sb, (gbuf_t *)NULL);
        } else {
            precv_check(0, 80, n, TAG + 55, "a message whose sender filled its buffer behind the held legacy stream");
        }
    }
    /* 4d. small device sends (staged; queued until the flush, their copies to the host waited for
     *     together): derived datatypes freed right after the call, a synchronous-mode send, a host
     *     send and a blocking send after them with the same tag (the non-overtaking order), a
     *     request freed by MPI_Request_free */
    if (rank < 2) {
        int hv = 0;
        if (rank == 0) {
            gbuf_t a = pbuf(0, 70, 6), b = pbuf(0, 71, 8), c = pbuf(0, 72, 2), d = pbuf(0, 73, 2), e = pbuf(0, 74, 5);
            MPI_Datatype pair, strided;
            MPI_Type_contiguous(2, MPI_INT, &pair);
            MPI_Type_commit(&pair);
            MPI_Type_vector(2, 2, 4, MPI_INT, &strided);  /* ints 0,1 and 4,5 of b */
            MPI_Type_commit(&strided);
            MPI_Request q[4], fr;
            hv = 7070;
            STEP();
            MPI_Isend(a.p, 3, pair, 1, TAG + 50, MPI_COMM_WORLD, &q[0]);
            MPI_Type_free(&pair);
            MPI_Isend(b.p, 1, strided, 1, TAG + 50, MPI_COMM_WORLD, &q[1]);
            MPI_Type_free(&strided);
            MPI_Issend(c.p, 2, MPI_INT, 1, TAG + 50, MPI_COMM_WORLD, &q[2]);
            MPI_Isend(&hv, 1, MPI_INT, 1, TAG + 50, MPI_COMM_WORLD, &q[3]);
            MPI_Isend(e.p, 5, MPI_INT, 1, TAG + 51, MPI_COMM_WORLD, &fr);
            MPI_Request_free(&fr);
            MPI_Send(d.p, 2, MPI_INT, 1, TAG + 50, MPI_COMM_WORLD);
            int rc = MPI_Waitall(4, q, MPI_STATUSES_IGNORE);
            CHECK(rc == MPI_SUCCESS, "Waitall of small sends returned %d", rc);
            MPI_Barrier(MPI_COMM_WORLD);  /* (the freed request's message is received by now) */
            gb_free_all(&a, &b, &c, &d, &e, (gbuf_t *)NULL);
        } else {
            int want_b[4];
            for (int i = 0; i < 2; i++) want_b[i] = pval(0, 71, i), want_b[2 + i] = pval(0, 71, 4 + i);
            precv_check(0, 70, 6, TAG + 50, "small send of a contiguous type freed after the call");
            gbuf_t r = gb_dev(sizeof(want_b));
            MPI_Status st;
            int cnt = -1;
            STEP();
            MPI_Recv(r.p, 4, MPI_INT, 0, TAG + 50, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &cnt);
            CHECK(cnt == 4, "small send of a vector type freed after the call: count %d (want 4)", cnt);
            gb_expect(&r, want_b, sizeof(int), "small send of a vector type freed after the call");
            gb_free(&r);
            precv_check(0, 72, 2, TAG + 50, "small synchronous-mode send");
            MPI_Recv(&hv, 1, MPI_INT, 0, TAG + 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(hv == 7070, "host message after small device sends with the same tag: %d", hv);
            precv_check(0, 73, 2, TAG + 50, "blocking small send after queued ones");
            precv_check(0, 74, 5, TAG + 51, "small send whose request was freed");
            MPI_Barrier(MPI_COMM_WORLD);
        }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* 5. a queued send, then nonblocking device collectives waited for (an agreement round): the
     *    peer receives the message before it issues the collectives */
    MPI_Comm c = fresh_dup();
    dev_allreduce_check(c, 256, 3, "the communicator's first collective (makes its NCCL communicator)");
    const int n = 1024;
    gbuf_t s = pbuf(rank, 8, n), r1 = gb_dev(n * sizeof(int)), r2 = gb_dev(n * sizeof(int));
    int *want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        long long t = 0;
        for (int k = 0; k < size; k++) t += pval(k, 8, i);
        want[i] = (int)t;
    }
    MPI_Request q[2], sq = MPI_REQUEST_NULL;
    gbuf_t a = pbuf(0, 9, BIG);
    STEP();
    if (rank == 0 && size > 1) MPI_Isend(a.p, BIG, MPI_INT, 1, TAG + 6, MPI_COMM_WORLD, &sq);
    if (rank == 1) precv_check(0, 9, BIG, TAG + 6, "device message before the collectives");
    STEP();
    MPI_Iallreduce(s.p, r1.p, n, MPI_INT, MPI_SUM, c, &q[0]);
    MPI_Iallreduce(s.p, r2.p, n, MPI_INT, MPI_SUM, c, &q[1]);
    int rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    CHECK(rc == MPI_SUCCESS, "Waitall of two Iallreduce returned %d", rc);
    MPI_Wait(&sq, MPI_STATUS_IGNORE);
    gb_expect(&r1, want, sizeof(int), "Iallreduce after a queued send (1)");
    gb_expect(&r2, want, sizeof(int), "Iallreduce after a queued send (2)");
    gb_free_all(&a, &s, &r1, &r2, (gbuf_t *)NULL);
    free(want);
    STEP();
    MPI_Comm_free(&c);
}

/* ---------------------------------------------------------------------------------------- */
/* connect_crossing: the first uses of NCCL's connections (sends and receives to each peer, an
 * algorithm a later call picks) in nonblocking collectives on two communicators issued in
 * opposite orders on even and odd ranks; NCCL connects at first use and waits for the peers there
 * (design.md, "Connected at creation") */

/* r holds the ints of want (where check), then s, r and want go */
static void expect_free(gbuf_t *s, gbuf_t *r, int *want, int check, const char *what)
{
    if (check) gb_expect(r, want, 4, what);
    gb_free(s);
    gb_free(r);
    free(want);
}

static void crossing_pair(int kind, int n, const char *what)
{
    MPI_Comm c[2] = {fresh_dup(), fresh_dup()};
    dev_allreduce_check(c[0], 1, 1, "creating A");
    dev_allreduce_check(c[1], 1, 2, "creating B");
    const int total = kind == 0 ? n : n * size;  /* allreduce: n; alltoall/gather: n per rank */
    gbuf_t s[2], r[2];
    int *want[2];
    for (int k = 0; k < 2; k++) {
        int *h = malloc((size_t)total * sizeof(int));
        want[k] = malloc((size_t)total * sizeof(int));
        for (int i = 0; i < total; i++) h[i] = (rank + 1) * 1000 + i + 7 * k;
        for (int i = 0; i < total; i++) {
            if (kind == 0) want[k][i] = size * (size + 1) / 2 * 1000 + size * (i + 7 * k);
            else if (kind == 1) want[k][i] = (i / n + 1) * 1000 + rank * n + i % n + 7 * k;  /* block from rank i/n */
            else want[k][i] = (i / n + 1) * 1000 + i % n + 7 * k;                            /* gather to rank 0 */
        }
        s[k] = gb_dev_from(h, (size_t)total * sizeof(int));
        r[k] = gb_dev((size_t)total * sizeof(int));
        free(h);
    }
    MPI_Request q[2];
    int rc[2] = {MPI_SUCCESS, MPI_SUCCESS};
    for (int j = 0; j < 2; j++) {
        const int k = rank % 2 ? 1 - j : j;
        STEP();
        if (kind == 0) rc[k] = MPI_Iallreduce(s[k].p, r[k].p, n, MPI_INT, MPI_SUM, c[k], &q[k]);
        else if (kind == 1) rc[k] = MPI_Ialltoall(s[k].p, n, MPI_INT, r[k].p, n, MPI_INT, c[k], &q[k]);
        else rc[k] = MPI_Igather(s[k].p, n, MPI_INT, r[k].p, n, MPI_INT, 0, c[k], &q[k]);
    }
    STEP();
    int rcw = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    CHECK(rc[0] == MPI_SUCCESS && rc[1] == MPI_SUCCESS && rcw == MPI_SUCCESS, "%s: calls %d %d, Waitall %d", what, rc[0],
          rc[1], rcw);
    for (int k = 0; k < 2; k++) expect_free(&s[k], &r[k], want[k], kind != 2 || rank == 0, what);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
}

/* cyclic_comms: a communicator per pair of neighbouring ranks on a ring (rank r with r+1), made
 * in an order every rank can follow, then each rank issues a nonblocking allreduce on its pair
 * with the next rank before the one with the previous rank: the issue orders form a cycle over
 * the communicators (legal MPI; a rank that waited inside the first call for its peers would
 * close the cycle) */
static void sc_cyclic_comms(void)
{
    const int n = 65536;
    MPI_Comm pair[2]; /* [0]: with the previous rank, [1]: with the next */
    for (int p = 0; p < size; p++) { /* ring pair p = {p, p+1}: every rank splits for each */
        MPI_Comm c;
        const int in = rank == p || rank == (p + 1) % size;
        MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, rank == p ? 0 : 1, &c);
        if (rank == p) pair[1] = c;
        else if (in) pair[0] = c;
    }
    for (int j = 0; j < 2; j++) { /* made by a blocking call, pairs in ring order: 0 first */
        const int k = rank == 0 ? 1 - j : j; /* rank 0 makes {0,1} before {size-1,0} */
        dev_allreduce_check(pair[k], 1, 5, "a pair communicator's first call");
    }
    for (int round = 0; round < 3; round++) {
        gbuf_t s[2], r[2];
        int *want[2];
        for (int k = 0; k < 2; k++) {
            const int other = k ? (rank + 1) % size : (rank + size - 1) % size;
            int *h = malloc((size_t)n * sizeof(int));
            want[k] = malloc((size_t)n * sizeof(int));
            for (int i = 0; i < n; i++) {
                h[i] = rank * 100000 + i + round;
                want[k][i] = (rank + other) * 100000 + 2 * (i + round);
            }
            s[k] = gb_dev_from(h, (size_t)n * sizeof(int));
            r[k] = gb_dev((size_t)n * sizeof(int));
            free(h);
        }
        MPI_Request q[2];
        STEP();
        int rc1 = MPI_Iallreduce(s[1].p, r[1].p, n, MPI_INT, MPI_SUM, pair[1], &q[1]);
        STEP();
        int rc0 = MPI_Iallreduce(s[0].p, r[0].p, n, MPI_INT, MPI_SUM, pair[0], &q[0]);
        STEP();
        int rcw = round == 1 ? MPI_Waitall(2, q, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
        if (round != 1) { /* completed in the order issued, or the other way round */
            rcw = MPI_Wait(&q[round == 0 ? 1 : 0], MPI_STATUS_IGNORE);
            if (rcw == MPI_SUCCESS) rcw = MPI_Wait(&q[round == 0 ? 0 : 1], MPI_STATUS_IGNORE);
        }
        CHECK(rc0 == MPI_SUCCESS && rc1 == MPI_SUCCESS && rcw == MPI_SUCCESS, "round %d: calls %d %d, waits %d", round,
              rc1, rc0, rcw);
        for (int k = 0; k < 2; k++)
            expect_free(&s[k], &r[k], want[k], 1, k ? "allreduce with the next rank" : "allreduce with the previous rank");
    }
    MPI_Comm_free(&pair[0]);
    MPI_Comm_free(&pair[1]);
}

static void sc_connect_crossing(void)
{
    crossing_pair(1, 1024, "Ialltoall on A and B in opposite orders");
    crossing_pair(2, 1024, "Igather on A and B in opposite orders");
    crossing_pair(0, 1 << 20, "4 MiB Iallreduce on A and B in opposite orders");
}

/* ---------------------------------------------------------------------------------------- */
/* reset_final, reset_reuse: the application resets its device (cudaDeviceReset) after device */
/* communication, as programs that tidy up their GPU before MPI_Finalize do                  */

/* a ring exchange of n ints on device buffers of comm c; returns the rc of the MPI calls and
 * checks the data when they succeeded */
static int dev_ring(MPI_Comm c, int n, int salt, const char *what)
{
    const int to = (rank + 1) % size, from = (rank + size - 1) % size;
    int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        h[i] = rank * 1000003 + i + salt;
        want[i] = from * 1000003 + i + salt;
    }
    gbuf_t sb = gb_dev_from(h, n * sizeof(int)), rb = gb_dev(n * sizeof(int));
    STEP();
    int rc = MPI_Sendrecv(sb.p, n, MPI_INT, to, 21, rb.p, n, MPI_INT, from, 21, c, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS) gb_expect(&rb, want, 4, what);
    gb_free_all(&sb, &rb, NULL);
    free(h);
    free(want);
    return rc;
}

/* device work of every kind ncclmpi keeps state for: a collective on a dup (left to free after
 * the reset), on the world (1 MiB: NCCL, or staged in pieces where ranks share a GPU), a
 * nonblocking one, device messages of two sizes */
static MPI_Comm reset_before(void)
{
    MPI_Comm sub = fresh_dup();
    dev_allreduce_check(sub, 4096, 5, "Allreduce on a dup before the reset");
    dev_allreduce_check(MPI_COMM_WORLD, 1 << 18, 6, "1 MiB Allreduce before the reset");
    CHECK(dev_ring(MPI_COMM_WORLD, 2, 1, "small device Sendrecv before the reset") == MPI_SUCCESS, "small Sendrecv failed");
    CHECK(dev_ring(MPI_COMM_WORLD, 1 << 18, 2, "1 MiB device Sendrecv before the reset") == MPI_SUCCESS, "1 MiB Sendrecv failed");
    {
        const int n = 1000;
        int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) h[i] = rank + i, want[i] = size * (size - 1) / 2 + size * i;
        gbuf_t sb = gb_dev_from(h, n * sizeof(int)), rb = gb_dev(n * sizeof(int));
        MPI_Request q;
        STEP();
        int rc = MPI_Iallreduce(sb.p, rb.p, n, MPI_INT, MPI_SUM, sub, &q);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS, "Iallreduce before the reset: %d", rc);
        gb_expect(&rb, want, 4, "Iallreduce before the reset");
        gb_free_all(&sb, &rb, NULL);
        free(h);
        free(want);
    }
    if (!host_mode) {
        STEP();
        CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset failed");
    }
    /* host calls as before */
    int x = rank + 1, y = 0;
    STEP();
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(y == size * (size + 1) / 2, "host Allreduce after the reset: %d", y);
    int got = -1;
    STEP();
    MPI_Sendrecv(&x, 1, MPI_INT, (rank + 1) % size, 22, &got, 1, MPI_INT, (rank + size - 1) % size, 22, sub,
                 MPI_STATUS_IGNORE);
    CHECK(got == (rank + size - 1) % size + 1, "host Sendrecv after the reset: %d", got);
    return sub;
}

/* then straight to MPI_Comm_free and MPI_Finalize, which must return */
static void sc_reset_final(void)
{
    MPI_Comm sub = reset_before();
    STEP();
    MPI_Comm_free(&sub);
}

/* then device calls again: each either works (the right result) or fails with an error class
 * through MPI_ERRORS_RETURN, on every rank alike (every rank reset); never a crash, a hang or a
 * wrong result */
static void sc_reset_reuse(void)
{
    MPI_Comm sub = reset_before();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    const int n = 4096;
    int *h = malloc(n * sizeof(int)), *want = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) h[i] = (rank + 1) * i, want[i] = size * (size + 1) / 2 * i;
    gbuf_t sb = gb_dev_from(h, n * sizeof(int)), rb = gb_dev(n * sizeof(int));
    MPI_Comm comms[2] = {sub, MPI_COMM_WORLD};
    int rcs[4];
    for (int k = 0; k < 2; k++) {
        STEP();
        rcs[k] = MPI_Allreduce(sb.p, rb.p, n, MPI_INT, MPI_SUM, comms[k]);
        if (rcs[k] == MPI_SUCCESS) gb_expect(&rb, want, 4, "Allreduce after the reset");
    }
    rcs[2] = dev_ring(sub, 64, 3, "device Sendrecv after the reset");
    {  /* a local call on a device buffer (staged by each rank on its own under ncclmpi) */
        int packed[64], pos = 0;
        STEP();
        rcs[3] = MPI_Pack(sb.p, 64, MPI_INT, packed, (int)sizeof(packed), &pos, MPI_COMM_WORLD);
        if (rcs[3] == MPI_SUCCESS)
            CHECK(pos == (int)sizeof(packed) && !memcmp(packed, h, sizeof(packed)), "MPI_Pack after the reset: wrong bytes");
    }
    for (int k = 0; k < 4; k++) {
        int cls = MPI_SUCCESS, len = 0;
        char msg[MPI_MAX_ERROR_STRING] = "";
        if (rcs[k] != MPI_SUCCESS) {
            MPI_Error_class(rcs[k], &cls);
            MPI_Error_string(rcs[k], msg, &len);
        }
        CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_OTHER, "call %d after the reset: class %d (%s)", k, cls, msg);
        if (rank == 0 && cls != MPI_SUCCESS)
            printf("gpu_hazard %s: call %d after the reset refused: %s\n", scen, k, msg);
    }
    gb_free_all(&sb, &rb, NULL);
    free(h);
    free(want);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    STEP();
    MPI_Comm_free(&sub);
}

/* ---------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*fn)(void);
    void (*fn_args)(int, char **);
    int min_ranks;   /* fewer ranks: skipped (exit 0) */
    int device_only; /* with --host: skipped (exit 0) */
    int threads;     /* MPI_Init_thread(MPI_THREAD_MULTIPLE) */
    int per_rank;    /* each rank's own verdict (no collective after the scenario) */
    int mixes_kinds; /* host and device buffers in one collective: NCCLMPI_AGREE=1 under ncclmpi */
    int nccl_only;   /* a failure of the NCCL route (injected, a killed peer): skipped (exit 77) where
                      * ranks share a GPU, whose calls run staged in the real MPI (design.md, "Failures") */
} scenario_t;

static const scenario_t scenarios[] = {
    {"layout_gather", sc_layout_gather, NULL, 1, 0, 0, 0, 0, 0},
    {"layout_bcast", sc_layout_bcast, NULL, 1, 0, 0, 0, 0, 0},
    {"layout_reduce", sc_layout_reduce, NULL, 1, 0, 0, 0, 0, 0},
    {"empty_gatherv_first", sc_empty_gatherv_first, NULL, 2, 0, 0, 0, 0, 0},
    {"empty_alltoallv_first", sc_empty_alltoallv_first, NULL, 2, 0, 0, 0, 0, 0},
    {"empty_scatterv", sc_empty_scatterv, NULL, 2, 0, 0, 0, 0, 0},
    {"bottom", sc_bottom, NULL, 1, 0, 0, 0, 0, 0},
    {"signature_pipelined", sc_signature_pipelined, NULL, 1, 0, 0, 0, 0, 0},
    {"uint8_sum", sc_uint8_sum, NULL, 1, 0, 0, 0, 1, 0},
    {"agree_mixed", sc_agree_mixed, NULL, 1, 0, 0, 0, 1, 0},
    {"threads", sc_threads, NULL, 1, 0, 1, 0, 0, 0},
    {"thread_comms", NULL, sc_thread_comms, 1, 0, 1, 0, 0, 0},
    {"first_nb_crossing", sc_first_nb_crossing, NULL, 2, 0, 0, 0, 0, 0},
    {"comm_free_outstanding", sc_comm_free_outstanding, NULL, 2, 0, 0, 0, 0, 0},
    {"dup_churn", sc_dup_churn, NULL, 1, 0, 0, 0, 0, 0},
    {"use_churn", sc_use_churn, NULL, 1, 0, 0, 0, 0, 0},
    {"use_churn_threads", sc_use_churn_threads, NULL, 1, 0, 1, 0, 0, 0},
    {"progress", sc_progress, NULL, 2, 0, 0, 0, 0, 0},
    {"coalesce_triggers", sc_coalesce_triggers, NULL, 2, 0, 0, 0, 0, 0},
    {"explicit_group", sc_explicit_group, NULL, 1, 0, 0, 0, 0, 0},
    {"field_range", sc_field_range, NULL, 1, 0, 0, 0, 0, 0},
    {"fault", sc_fault, NULL, 1, 1, 0, 1, 0, 1},
    {"fault_nb", sc_fault_nb, NULL, 1, 1, 0, 1, 0, 1},
    {"kill", sc_kill, NULL, 2, 1, 0, 1, 0, 1},
    {"fuzz", NULL, sc_fuzz, 1, 0, 0, 0, 0, 0},
    {"group_mix", NULL, sc_group_mix, 1, 0, 0, 0, 0, 0},
    {"envelope_order", sc_envelope_order, NULL, 2, 0, 0, 0, 0, 0},
    {"connect_crossing", sc_connect_crossing, NULL, 2, 0, 0, 0, 0, 0},
    {"cyclic_comms", sc_cyclic_comms, NULL, 3, 0, 0, 0, 0, 0},
    {"reset_final", sc_reset_final, NULL, 1, 0, 0, 0, 0, 0},
    {"reset_reuse", sc_reset_reuse, NULL, 1, 0, 0, 0, 0, 0},
};

static void usage(void)
{
    fprintf(stderr, "usage: gpu_hazard [--host] <scenario> [args]\nscenarios:");
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) fprintf(stderr, " %s", scenarios[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    int a = 1;
    if (a < argc && strcmp(argv[a], "--host") == 0) {
        host_mode = 1;
        a++;
    }
    if (a >= argc) {
        usage();
        return 2;
    }
    const scenario_t *sc = NULL;
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        if (strcmp(argv[a], scenarios[i].name) == 0) sc = &scenarios[i];
    if (!sc) {
        fprintf(stderr, "gpu_hazard: unknown scenario \"%s\"\n", argv[a]);
        usage();
        return 2;
    }
    scen = sc->name;
    a++;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (sc->threads) {
        int provided = MPI_THREAD_SINGLE;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            if (rank == 0) printf("gpu_hazard %s: skipped (MPI_THREAD_MULTIPLE not provided: %d)\n", scen, provided);
            MPI_Finalize();
            return 0;
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (sc->device_only && host_mode) {
        if (rank == 0) printf("gpu_hazard %s: skipped (device only; --host given)\n", scen);
        MPI_Finalize();
        return 0;
    }
    if (!host_mode) {
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
            if (rank == 0) printf("gpu_hazard %s: skipped (no usable GPU)\n", scen);
            MPI_Finalize();
            return 77;
        }
        int distinct = gpu_select(NULL), all_distinct = 0;
        CUDACHECK(cudaGetDevice(&g_dev));
        /* (agreed: a rank that skipped alone would leave the others waiting in the scenario) */
        MPI_Allreduce(&distinct, &all_distinct, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        g_distinct = all_distinct;
        if (sc->nccl_only && !all_distinct) {
            if (rank == 0) printf("gpu_hazard %s: skipped (ranks share a GPU: the calls run staged, not on NCCL)\n", scen);
            MPI_Finalize();
            return 77;
        }
        const char *agree = getenv("NCCLMPI_AGREE");
        if (sc->mixes_kinds && dlsym(RTLD_DEFAULT, "ncclmpi_get_stats") && !(agree && agree[0] == '1')) {
            if (rank == 0)
                printf("gpu_hazard %s: skipped (mixes host and device buffers: needs NCCLMPI_AGREE=1 under ncclmpi)\n",
                       scen);
            MPI_Finalize();
            return 77;
        }
    }
    if (size < sc->min_ranks) {
        if (rank == 0) printf("gpu_hazard %s: skipped (needs %d ranks)\n", scen, sc->min_ranks);
        MPI_Finalize();
        return 0;
    }
    watchdog_start();
    if (sc->fn_args)
        sc->fn_args(argc - a, argv + a);
    else
        sc->fn();
    int total = failures;
    if (sc->per_rank) { /* the verdict of this rank alone: others may have failed communicators */
        printf("gpu_hazard %s: %s (rank %d, %d failure(s))\n", scen, failures ? "FAIL" : "OK", rank, failures);
    } else {
        MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) {
            if (total)
                printf("gpu_hazard %s: FAIL (%d failure(s), %d ranks%s)\n", scen, total, size,
                       host_mode ? ", --host" : "");
            else
                printf("gpu_hazard %s: OK (%d ranks%s)\n", scen, size, host_mode ? ", --host" : "");
        }
    }
    fflush(stdout);
    MPI_Finalize();
    return total ? 1 : 0;
}
