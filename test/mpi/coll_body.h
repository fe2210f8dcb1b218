/* The collective tests, shared by coll_blocking.c (NB 0: MPI_<Name>) and coll_nonblocking.c
 * (NB 1: MPI_I<name>, completed by a rotating choice of Wait/Waitall/Waitany/Waitsome/Test/
 * Testall/Testany/Testsome). Include after common.h with NB defined.
 *
 * Reductions run a table of cases (type x op, predefined and user-defined, commutative and
 * not); the expected result is folded here in rank order from the per-rank generators.
 * Data movement runs a table of (send type, count) / (receive type, count) pairs with equal
 * type signatures: int, double, a contiguous type and a resized vector type (whose gaps must
 * stay poisoned). Every result is compared with a memory image of the whole receive buffer
 * built here, so gaps, displacement holes and the bytes behind the buffer are checked too.
 */
#ifndef NB
#error "define NB"
#endif

static MPI_Comm C;    /* communicator under test */
static int R, P;      /* its rank and size */
static const char *CN; /* its name in messages */
static int roots[3], nroots;

/* ---- calling a collective ------------------------------------------------------------------ */
#if NB
static MPI_Request nb_req;
static unsigned nb_rot;
static int nb_complete(const char *file, int line, const char *fn, int rc)
{
    if (!tu_ok(file, line, fn, rc)) return 0;
    CHECK(nb_req != MPI_REQUEST_NULL, "%s returned MPI_REQUEST_NULL (%s:%d)", fn, file, line);
    MPI_Status st[1];
    int flag = 0, idx = -7, out = -7, ok = 1;
    switch (nb_rot++ % 8) {
    case 0: ok = OK(Wait, &nb_req, &st[0]); break;
    case 1: while (ok && !flag) ok = OK(Test, &nb_req, &flag, &st[0]); break;
    case 2: ok = OK(Waitall, 1, &nb_req, st); break;
    case 3: ok = OK(Waitany, 1, &nb_req, &idx, &st[0]); CHECK(idx == 0, "Waitany index %d", idx); break;
    case 4: while (ok && !flag) ok = OK(Testall, 1, &nb_req, &flag, st); break;
    case 5:
        ok = OK(Waitsome, 1, &nb_req, &out, &idx, st);
        CHECK(out == 1 && idx == 0, "Waitsome outcount %d index %d", out, idx);
        break;
    case 6:
        while (ok && !flag) ok = OK(Testany, 1, &nb_req, &idx, &flag, &st[0]);
        CHECK(idx == 0, "Testany index %d", idx);
        break;
    default:
        while (ok && out <= 0) {
            ok = OK(Testsome, 1, &nb_req, &out, &idx, st);
            CHECK(out == 0 || out == 1, "Testsome outcount %d", out);
        }
        CHECK(idx == 0, "Testsome index %d", idx);
        break;
    }
    CHECK(nb_req == MPI_REQUEST_NULL, "request of %s not freed by its completion (%s:%d)", fn, file, line);
    return ok;
}
#define COLL(B, I, ...) nb_complete(__FILE__, __LINE__, "MPI_" #I, (nb_req = MPI_REQUEST_NULL, CALL(I, __VA_ARGS__, &nb_req)))
#define COLLNAME(B, I) "MPI_" #I
#else
#define COLL(B, I, ...) tu_ok(__FILE__, __LINE__, "MPI_" #B, CALL(B, __VA_ARGS__))
#define COLLNAME(B, I) "MPI_" #B
#endif

/* ---- derived types and user ops --------------------------------------------------------- */
static MPI_Datatype T_CT2;

/* inout = in + inout + 1: commutative, associative; the result counts the applications */
static void op_plus1_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const int *a = (const int *)in;
    int *b = (int *)inout;
    for (int k = 0; k < *len; k++) b[k] = a[k] + b[k] + 1;
}
/* affine maps x -> a*x + b as (a, b) pairs; inout = inout o in: associative, not commutative */
static void affine_comb(const int *lo, int *hi)
{
    int a = lo[0] * hi[0], b = hi[0] * lo[1] + hi[1];
    hi[0] = a;
    hi[1] = b;
}
static void op_affine_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    const int *a = (const int *)in;
    int *b = (int *)inout;
    for (int k = 0; k < *len; k++) affine_comb(a + 2 * k, b + 2 * k);
}
static MPI_Op OP_PLUS1, OP_AFFINE;

static void types_create(void)
{
    tu_types_create();
    MPI_Type_contiguous(2, MPI_INT, &T_CT2);
    MPI_Type_commit(&T_CT2);
    MPI_Op_create(op_plus1_fn, 1, &OP_PLUS1);
    MPI_Op_create(op_affine_fn, 0, &OP_AFFINE);
}
static void types_free(void)
{
    MPI_Type_free(&T_CT2);
    MPI_Op_free(&OP_PLUS1);
    MPI_Op_free(&OP_AFFINE);
    tu_types_free();
}

static void set_comm(MPI_Comm c, const char *name)
{
    C = c;
    CN = name;
    MPI_Comm_rank(c, &R);
    MPI_Comm_size(c, &P);
    int cand[3] = {0, P - 1, P / 2};
    nroots = 0;
    for (int i = 0; i < 3; i++) {
        int dup = 0;
        for (int j = 0; j < nroots; j++) dup |= roots[j] == cand[i];
        if (!dup) roots[nroots++] = cand[i];
    }
}

/* ======================================================================================== */
/* reductions                                                                               */
/* ======================================================================================== */
typedef struct {
    const char *name;
    MPI_Datatype type;
    size_t esize; /* bytes between elements */
    MPI_Op op;
    int commutative;
    void (*gen)(int r, long i, void *e);
    void (*comb)(const void *lo, void *hi); /* hi = lo op hi */
    int (*eq)(const void *a, const void *b);
    void (*show)(const void *e, char *s, size_t n);
} rcase_t;

typedef struct {
    double v;
    int l;
} dbl_int_t;

/* generators: rank r, element i */
static int sgn(int r, long i) { return ((r + i) % 2) ? 1 : -1; }
static void g_i_sum(int r, long i, void *e) { *(int *)e = ival(r, i); }
static void g_i_signed(int r, long i, void *e) { *(int *)e = sgn(r, i) * ival((int)((r * 7 + i) % 5), i); }
static void g_i_prod(int r, long i, void *e) { *(int *)e = sgn(r, i + 1) * (int)(1 + (r + i) % 3); }
static void g_i_bits(int r, long i, void *e) { *(int *)e = (int)(((unsigned)ival(r, i) * 2654435761u) >> 2); }
static void g_i_log(int r, long i, void *e) { *(int *)e = ((r + i) % 3 != 0) ? 1 + r : 0; }
static void g_i_log2(int r, long i, void *e) { *(int *)e = ((r * 5 + i) % 7 == 0) ? 3 : 0; }
static void g_d(int r, long i, void *e) { *(double *)e = dval(r, i); }
static void g_d_signed(int r, long i, void *e) { *(double *)e = sgn(r, i) * dval((int)((r * 3 + i) % 4), i); }
static void g_d_prod(int r, long i, void *e) { *(double *)e = sgn(r, i) * (0.5 + (r + i) % 4); }
static void g_ll(int r, long i, void *e) { *(long long *)e = (long long)ival(r, i) * 1000000007LL + r; }
static void g_f(int r, long i, void *e) { *(float *)e = (float)dval(r, i % 64); }
static void g_s(int r, long i, void *e) { *(short *)e = (short)(r * 100 + i % 50 + 1); }
static void g_uc(int r, long i, void *e) { *(unsigned char *)e = (unsigned char)((1u << (r % 8)) | ((i * 16) & 0xF0)); }
static void g_u64(int r, long i, void *e) { *(uint64_t *)e = ((uint64_t)(r * 37 + i) % 11) << 40 | (uint64_t)(i + 1); }
static void g_dblint(int r, long i, void *e)
{
    dbl_int_t *x = (dbl_int_t *)e;
    x->v = (double)((r * 3 + i) % 4) + 0.5;
    x->l = r * 10 + (int)(i % 3);
}
static void g_2int(int r, long i, void *e)
{
    int *x = (int *)e;
    x[0] = (int)((r * 5 + i) % 3) + 1;
    x[1] = r * 10 + (int)(i % 4);
}
static void g_affine(int r, long i, void *e)
{
    ((int *)e)[0] = 1 + (int)((r + i) % 2);
    ((int *)e)[1] = r * 3 + (int)(i % 5) + 1;
}

/* combiners: hi = lo op hi */
#define COMB2(NAME, T, EXPR)                                                                  \
    static void NAME(const void *lo_, void *hi_)                                              \
    {                                                                                         \
        T a = *(const T *)lo_, b = *(T *)hi_;                                                 \
        *(T *)hi_ = (EXPR);                                                                   \
    }
COMB2(c_i_sum, int, a + b)
COMB2(c_i_max, int, a > b ? a : b)
COMB2(c_i_min, int, a < b ? a : b)
COMB2(c_i_prod, int, a *b)
COMB2(c_i_band, int, a &b)
COMB2(c_i_bor, int, a | b)
COMB2(c_i_bxor, int, a ^ b)
COMB2(c_i_land, int, (a && b) ? 1 : 0)
COMB2(c_i_lor, int, (a || b) ? 1 : 0)
COMB2(c_i_lxor, int, (!a != !b) ? 1 : 0)
COMB2(c_i_plus1, int, a + b + 1)
COMB2(c_d_sum, double, a + b)
COMB2(c_d_max, double, a > b ? a : b)
COMB2(c_d_min, double, a < b ? a : b)
COMB2(c_d_prod, double, a *b)
COMB2(c_ll_sum, long long, a + b)
COMB2(c_f_sum, float, a + b)
COMB2(c_s_sum, short, (short)(a + b))
COMB2(c_uc_bor, unsigned char, (unsigned char)(a | b))
COMB2(c_u64_max, uint64_t, a > b ? a : b)
static void c_maxloc(const void *lo_, void *hi_)
{
    const dbl_int_t *a = (const dbl_int_t *)lo_;
    dbl_int_t *b = (dbl_int_t *)hi_;
    if (a->v > b->v || (a->v == b->v && a->l < b->l)) *b = *a;
}
static void c_minloc2(const void *lo_, void *hi_)
{
    const int *a = (const int *)lo_;
    int *b = (int *)hi_;
    if (a[0] < b[0] || (a[0] == b[0] && a[1] < b[1])) {
        b[0] = a[0];
        b[1] = a[1];
    }
}
static void c_affine(const void *lo_, void *hi_) { affine_comb((const int *)lo_, (int *)hi_); }

static int eq_4(const void *a, const void *b) { return !memcmp(a, b, 4); }
static int eq_8(const void *a, const void *b) { return !memcmp(a, b, 8); }
static int eq_2(const void *a, const void *b) { return !memcmp(a, b, 2); }
static int eq_1(const void *a, const void *b) { return !memcmp(a, b, 1); }
static int eq_d(const void *a, const void *b) { return *(const double *)a == *(const double *)b; }
static int eq_dblint(const void *a, const void *b)
{
    const dbl_int_t *x = (const dbl_int_t *)a, *y = (const dbl_int_t *)b;
    return x->v == y->v && x->l == y->l;
}
static void s_i(const void *e, char *s, size_t n) { snprintf(s, n, "%d", *(const int *)e); }
static void s_i2(const void *e, char *s, size_t n) { snprintf(s, n, "(%d,%d)", ((const int *)e)[0], ((const int *)e)[1]); }
static void s_d(const void *e, char *s, size_t n) { snprintf(s, n, "%.17g", *(const double *)e); }
static void s_f(const void *e, char *s, size_t n) { snprintf(s, n, "%.9g", (double)*(const float *)e); }
static void s_ll(const void *e, char *s, size_t n) { snprintf(s, n, "%lld", *(const long long *)e); }
static void s_s(const void *e, char *s, size_t n) { snprintf(s, n, "%d", (int)*(const short *)e); }
static void s_uc(const void *e, char *s, size_t n) { snprintf(s, n, "%u", (unsigned)*(const unsigned char *)e); }
static void s_u64(const void *e, char *s, size_t n) { snprintf(s, n, "%llu", (unsigned long long)*(const uint64_t *)e); }
static void s_dblint(const void *e, char *s, size_t n)
{
    snprintf(s, n, "(%.17g,%d)", ((const dbl_int_t *)e)->v, ((const dbl_int_t *)e)->l);
}

#define NRCASES 26
static rcase_t RC[NRCASES];
static int nrc;
static const rcase_t *RC_INT_SUM, *RC_DBL_SUM, *RC_AFFINE;

static void rcases_init(void)
{
    nrc = 0;
#define ADD(N, T, SZ, OP, COMM, G, CB, EQ, SH) RC[nrc++] = (rcase_t){N, T, SZ, OP, COMM, G, CB, EQ, SH}
    ADD("int sum", MPI_INT, 4, MPI_SUM, 1, g_i_sum, c_i_sum, eq_4, s_i);
    RC_INT_SUM = &RC[nrc - 1];
    ADD("int max", MPI_INT, 4, MPI_MAX, 1, g_i_signed, c_i_max, eq_4, s_i);
    ADD("int min", MPI_INT, 4, MPI_MIN, 1, g_i_signed, c_i_min, eq_4, s_i);
    ADD("int prod", MPI_INT, 4, MPI_PROD, 1, g_i_prod, c_i_prod, eq_4, s_i);
    ADD("int band", MPI_INT, 4, MPI_BAND, 1, g_i_bits, c_i_band, eq_4, s_i);
    ADD("int bor", MPI_INT, 4, MPI_BOR, 1, g_i_bits, c_i_bor, eq_4, s_i);
    ADD("int bxor", MPI_INT, 4, MPI_BXOR, 1, g_i_bits, c_i_bxor, eq_4, s_i);
    ADD("int land", MPI_INT, 4, MPI_LAND, 1, g_i_log, c_i_land, eq_4, s_i);
    ADD("int lor", MPI_INT, 4, MPI_LOR, 1, g_i_log2, c_i_lor, eq_4, s_i);
    ADD("int lxor", MPI_INT, 4, MPI_LXOR, 1, g_i_log, c_i_lxor, eq_4, s_i);
    ADD("double sum", MPI_DOUBLE, 8, MPI_SUM, 1, g_d, c_d_sum, eq_d, s_d);
    RC_DBL_SUM = &RC[nrc - 1];
    ADD("double max", MPI_DOUBLE, 8, MPI_MAX, 1, g_d_signed, c_d_max, eq_d, s_d);
    ADD("double min", MPI_DOUBLE, 8, MPI_MIN, 1, g_d_signed, c_d_min, eq_d, s_d);
    ADD("double prod", MPI_DOUBLE, 8, MPI_PROD, 1, g_d_prod, c_d_prod, eq_d, s_d);
    ADD("long long sum", MPI_LONG_LONG, 8, MPI_SUM, 1, g_ll, c_ll_sum, eq_8, s_ll);
    ADD("float sum", MPI_FLOAT, 4, MPI_SUM, 1, g_f, c_f_sum, eq_4, s_f);
    ADD("short sum", MPI_SHORT, 2, MPI_SUM, 1, g_s, c_s_sum, eq_2, s_s);
    ADD("unsigned char bor", MPI_UNSIGNED_CHAR, 1, MPI_BOR, 1, g_uc, c_uc_bor, eq_1, s_uc);
    ADD("uint64 max", MPI_UINT64_T, 8, MPI_MAX, 1, g_u64, c_u64_max, eq_8, s_u64);
    ADD("double_int maxloc", MPI_DOUBLE_INT, sizeof(dbl_int_t), MPI_MAXLOC, 1, g_dblint, c_maxloc, eq_dblint, s_dblint);
    ADD("2int minloc", MPI_2INT, 8, MPI_MINLOC, 1, g_2int, c_minloc2, eq_8, s_i2);
    /* (Open MPI 4.1 rejects predefined ops on derived types with MPI_ERR_OP: errors.c) */
    ADD("int user op plus1", MPI_INT, 4, OP_PLUS1, 1, g_i_sum, c_i_plus1, eq_4, s_i);
    ADD("contiguous(2 int) user op affine (non-commutative)", T_CT2, 8, OP_AFFINE, 0, g_affine, c_affine, eq_8, s_i2);
    RC_AFFINE = &RC[nrc - 1];
#undef ADD
    if (nrc > NRCASES) abort();
}

static void rc_fill(const rcase_t *c, int r, long first, long n, void *buf)
{
    for (long i = 0; i < n; i++) c->gen(r, first + i, (char *)buf + i * c->esize);
}
/* out[i] = v_lo(first+i) op ... op v_hi(first+i) in rank order */
static void rc_fold(const rcase_t *c, int lo, int hi, long first, long n, void *out)
{
    char tmp[64];
    for (long i = 0; i < n; i++) {
        char *o = (char *)out + i * c->esize;
        memset(o, 0, c->esize);
        c->gen(lo, first + i, o);
        for (int q = lo + 1; q <= hi; q++) {
            memset(tmp, 0, sizeof(tmp));
            c->gen(q, first + i, tmp);
            c->comb(o, tmp);
            memcpy(o, tmp, c->esize);
        }
    }
}
__attribute__((format(printf, 7, 8))) static int rc_cmp(const char *file, int line, const rcase_t *c,
                                                        const void *got, const void *exp, long n, const char *what, ...)
{
    long bad = 0;
    tu.checks++;
    for (long i = 0; i < n; i++) {
        const char *g = (const char *)got + i * c->esize, *e = (const char *)exp + i * c->esize;
        if (c->eq(g, e)) continue;
        if (bad++ < 3) {
            char ctx[256], sg[96], se[96];
            va_list ap;
            va_start(ap, what);
            vsnprintf(ctx, sizeof(ctx), what, ap);
            va_end(ap);
            c->show(g, sg, sizeof(sg));
            c->show(e, se, sizeof(se));
            tu_fail(file, line, "values", "%s (%s) [%ld]: got %s, expected %s", ctx, c->name, i, sg, se);
        }
    }
    if (bad > 3) tu_fail(file, line, "values", "%s (%s): %ld of %ld elements differ", what, c->name, bad, n);
    return bad == 0;
}
#define CHECK_RC(c, got, exp, n, ...) rc_cmp(__FILE__, __LINE__, (c), (got), (exp), (n), __VA_ARGS__)

/* The cases run at a small count; int sum, double sum and the non-commutative op also at
 * 0, 1 and large counts (several protocol paths of the real MPI). */
typedef struct {
    const rcase_t *c;
    long n;
} rrun_t;
static int rruns(rrun_t *out)
{
    int k = 0;
    for (int i = 0; i < nrc; i++) out[k++] = (rrun_t){&RC[i], 13};
    const long big[] = {0, 1, 1500, 40000};
    for (int b = 0; b < 4; b++) {
        out[k++] = (rrun_t){RC_INT_SUM, big[b]};
        out[k++] = (rrun_t){RC_DBL_SUM, big[b]};
        if (big[b] <= 1500) out[k++] = (rrun_t){RC_AFFINE, big[b]};
    }
    return k;
}

static void t_allreduce(void)
{
    rrun_t runs[64];
    int nr = rruns(runs);
    for (int k = 0; k < nr; k++) {
        const rcase_t *c = runs[k].c;
        long n = runs[k].n;
        size_t bytes = n * c->esize;
        void *s = tu_alloc(bytes), *r = tu_alloc(bytes), *e = tu_alloc(bytes), *s0 = tu_alloc(bytes);
        rc_fill(c, R, 0, n, s);
        memcpy(s0, s, bytes);
        rc_fold(c, 0, P - 1, 0, n, e);
        if (COLL(Allreduce, Iallreduce, s, r, (int)n, c->type, c->op, C))
            CHECK_RC(c, r, e, n, "%s n=%ld on %s", COLLNAME(Allreduce, Iallreduce), n, CN);
        CHECK_GUARD(r);
        CHECK(!memcmp(s, s0, bytes), "send buffer modified");
        /* MPI_IN_PLACE */
        tu_repoison(r);
        rc_fill(c, R, 0, n, r);
        if (COLL(Allreduce, Iallreduce, MPI_IN_PLACE, r, (int)n, c->type, c->op, C))
            CHECK_RC(c, r, e, n, "%s in place n=%ld on %s", COLLNAME(Allreduce, Iallreduce), n, CN);
        CHECK_GUARD(r);
        tu_free(s), tu_free(r), tu_free(e), tu_free(s0);
    }
    /* zero count with NULL buffers */
    COLL(Allreduce, Iallreduce, NULL, NULL, 0, MPI_INT, MPI_SUM, C);
}

static void t_reduce(void)
{
    rrun_t runs[64];
    int nr = rruns(runs);
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < nr; k++) {
            const rcase_t *c = runs[k].c;
            long n = runs[k].n;
            size_t bytes = n * c->esize;
            void *s = tu_alloc(bytes), *r = tu_alloc(bytes), *e = tu_alloc(bytes);
            rc_fill(c, R, 0, n, s);
            rc_fold(c, 0, P - 1, 0, n, e);
            /* non-roots alternately pass NULL or a buffer that must stay untouched */
            void *rb = (R == root || k % 2) ? r : NULL;
            if (COLL(Reduce, Ireduce, s, rb, (int)n, c->type, c->op, root, C)) {
                if (R == root) CHECK_RC(c, r, e, n, "%s root %d n=%ld on %s", COLLNAME(Reduce, Ireduce), root, n, CN);
                else CHECK_POISON(r, bytes, "%s wrote the receive buffer of non-root %d", COLLNAME(Reduce, Ireduce), R);
            }
            CHECK_GUARD(r);
            /* MPI_IN_PLACE at the root */
            tu_repoison(r);
            if (R == root) rc_fill(c, R, 0, n, r);
            if (COLL(Reduce, Ireduce, R == root ? MPI_IN_PLACE : s, R == root ? r : NULL, (int)n, c->type, c->op, root, C)) {
                if (R == root) CHECK_RC(c, r, e, n, "%s in place root %d n=%ld on %s", COLLNAME(Reduce, Ireduce), root, n, CN);
            }
            CHECK_GUARD(r);
            tu_free(s), tu_free(r), tu_free(e);
        }
    }
}

/* per-rank block counts with a zero: 1 0 3 1 1 0 3 ... */
static int cvar(int q) { return (q % 4 == 1) ? 0 : (q % 3) + 1; }

static void t_reduce_scatter(void)
{
    rrun_t runs[64];
    int nr = rruns(runs);
    int *rcounts = (int *)malloc(P * sizeof(int));
    for (int k = 0; k < nr; k++) {
        const rcase_t *c = runs[k].c;
        long base = runs[k].n < 1500 ? runs[k].n : runs[k].n / 8, total = 0, off = 0;
        for (int q = 0; q < P; q++) {
            rcounts[q] = (int)(base * cvar(q));
            if (q < R) off += rcounts[q];
            total += rcounts[q];
        }
        long mine = rcounts[R];
        void *s = tu_alloc(total * c->esize), *r = tu_alloc(mine * c->esize), *e = tu_alloc(total * c->esize);
        rc_fill(c, R, 0, total, s);
        rc_fold(c, 0, P - 1, 0, total, e);
        if (COLL(Reduce_scatter, Ireduce_scatter, s, r, rcounts, c->type, c->op, C))
            CHECK_RC(c, r, (char *)e + off * c->esize, mine, "%s base %ld on %s",
                     COLLNAME(Reduce_scatter, Ireduce_scatter), base, CN);
        CHECK_GUARD(r);
        /* MPI_IN_PLACE: the input is the whole receive buffer, the result its first block */
        void *ip = tu_alloc(total * c->esize);
        rc_fill(c, R, 0, total, ip);
        if (COLL(Reduce_scatter, Ireduce_scatter, MPI_IN_PLACE, ip, rcounts, c->type, c->op, C))
            CHECK_RC(c, ip, (char *)e + off * c->esize, mine, "%s in place base %ld on %s",
                     COLLNAME(Reduce_scatter, Ireduce_scatter), base, CN);
        CHECK_GUARD(ip);
        tu_free(s), tu_free(r), tu_free(e), tu_free(ip);
    }
    free(rcounts);
}

static void t_reduce_scatter_block(void)
{
    rrun_t runs[64];
    int nr = rruns(runs);
    for (int k = 0; k < nr; k++) {
        const rcase_t *c = runs[k].c;
        long n = runs[k].n < 1500 ? runs[k].n : runs[k].n / 8, total = n * P;
        void *s = tu_alloc(total * c->esize), *r = tu_alloc(n * c->esize), *e = tu_alloc(total * c->esize);
        rc_fill(c, R, 0, total, s);
        rc_fold(c, 0, P - 1, 0, total, e);
        if (COLL(Reduce_scatter_block, Ireduce_scatter_block, s, r, (int)n, c->type, c->op, C))
            CHECK_RC(c, r, (char *)e + R * n * c->esize, n, "%s n=%ld on %s",
                     COLLNAME(Reduce_scatter_block, Ireduce_scatter_block), n, CN);
        CHECK_GUARD(r);
        void *ip = tu_alloc(total * c->esize);
        rc_fill(c, R, 0, total, ip);
        if (COLL(Reduce_scatter_block, Ireduce_scatter_block, MPI_IN_PLACE, ip, (int)n, c->type, c->op, C))
            CHECK_RC(c, ip, (char *)e + R * n * c->esize, n, "%s in place n=%ld on %s",
                     COLLNAME(Reduce_scatter_block, Ireduce_scatter_block), n, CN);
        CHECK_GUARD(ip);
        tu_free(s), tu_free(r), tu_free(e), tu_free(ip);
    }
}

static void t_scan(int exclusive)
{
    rrun_t runs[64];
    int nr = rruns(runs);
    for (int k = 0; k < nr; k++) {
        const rcase_t *c = runs[k].c;
        long n = runs[k].n;
        size_t bytes = n * c->esize;
        void *s = tu_alloc(bytes), *r = tu_alloc(bytes), *e = tu_alloc(bytes);
        rc_fill(c, R, 0, n, s);
        int check = !exclusive || R > 0; /* Exscan: rank 0's result is undefined */
        if (check) rc_fold(c, 0, exclusive ? R - 1 : R, 0, n, e);
        for (int inplace = 0; inplace < 2; inplace++) {
            tu_repoison(r);
            if (inplace) rc_fill(c, R, 0, n, r);
            const void *sb = inplace ? MPI_IN_PLACE : s;
            int ok = exclusive ? COLL(Exscan, Iexscan, sb, r, (int)n, c->type, c->op, C)
                               : COLL(Scan, Iscan, sb, r, (int)n, c->type, c->op, C);
            if (ok && check)
                CHECK_RC(c, r, e, n, "%s%s n=%ld on %s", exclusive ? COLLNAME(Exscan, Iexscan) : COLLNAME(Scan, Iscan),
                         inplace ? " in place" : "", n, CN);
            CHECK_GUARD(r);
        }
        tu_free(s), tu_free(r), tu_free(e);
    }
}

/* ======================================================================================== */
/* data movement                                                                            */
/* ======================================================================================== */
typedef struct {
    const mtype_t *st;
    int sc; /* send side: type and count (per block) */
    const mtype_t *rt;
    int rc; /* receive side */
} mpair_t;
#define NPAIRS 8
static mpair_t PAIRS[NPAIRS];
static void mtypes_init(void)
{
    int k = 0;
    PAIRS[k++] = (mpair_t){&M_INT, 1, &M_INT, 1};
    PAIRS[k++] = (mpair_t){&M_INT, 37, &M_INT, 37};
    PAIRS[k++] = (mpair_t){&M_INT, 5000, &M_INT, 5000};
    PAIRS[k++] = (mpair_t){&M_DBL, 7, &M_DBL, 7};
    PAIRS[k++] = (mpair_t){&M_CT3, 4, &M_INT, 12};
    PAIRS[k++] = (mpair_t){&M_INT, 12, &M_VEC, 2};
    PAIRS[k++] = (mpair_t){&M_VEC, 3, &M_CT3, 6};
    PAIRS[k++] = (mpair_t){&M_INT, 0, &M_INT, 0};
}
static const char *pname(const mpair_t *p, char *buf, size_t n)
{
    snprintf(buf, n, "%d %s -> %d %s", p->sc, p->st->name, p->rc, p->rt->name);
    return buf;
}
/* the in-place variants use the receive side only */
static int pair_inplace(int k) { return k == 1 || k == 5 || k == 3; }

static void t_bcast(void)
{
    char pn[128];
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < NPAIRS; k++) {
            const mpair_t *p = &PAIRS[k];
            /* the root describes its buffer with the send side, the others with the receive side */
            const mtype_t *m = R == root ? p->st : p->rt;
            int cnt = R == root ? p->sc : p->rc;
            rimg_t x = rimg_new(cnt * m->ext);
            mt_place(m, x.img, cnt, root, 0);
            if (R == root) mt_place(m, x.buf, cnt, root, 0);
            if (COLL(Bcast, Ibcast, x.buf, cnt, m->type, root, C))
                CHECK_RIMG(x, "%s root %d %s on %s", COLLNAME(Bcast, Ibcast), root, pname(p, pn, sizeof(pn)), CN);
            rimg_free(&x);
        }
        /* a large one, over the pipelining thresholds */
        int n = 70000;
        rimg_t x = rimg_new(n);
        mt_place(&M_INT, x.img, n, root, 1);
        if (R == root) mt_place(&M_INT, x.buf, n, root, 1);
        if (COLL(Bcast, Ibcast, x.buf, n, MPI_INT, root, C))
            CHECK_RIMG(x, "%s root %d %d int on %s", COLLNAME(Bcast, Ibcast), root, n, CN);
        rimg_free(&x);
    }
    COLL(Bcast, Ibcast, NULL, 0, MPI_INT, P - 1, C);
}

static void t_gather(void)
{
    char pn[128];
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < NPAIRS; k++) {
            const mpair_t *p = &PAIRS[k];
            long blk = (long)p->rc * p->rt->ext; /* ints per rank block at the root */
            int *s = (int *)tu_alloc(mt_bytes(p->st, p->sc));
            mt_place(p->st, s, p->sc, R, root);
            rimg_t x = rimg_new(R == root ? blk * P : 8);
            if (R == root)
                for (int q = 0; q < P; q++) mt_place(p->rt, x.img + q * blk, p->rc, q, root);
            void *rb = (R == root || k % 2) ? x.buf : NULL;
            if (COLL(Gather, Igather, s, p->sc, p->st->type, rb, p->rc, p->rt->type, root, C))
                CHECK_RIMG(x, "%s root %d %s on %s", COLLNAME(Gather, Igather), root, pname(p, pn, sizeof(pn)), CN);
            rimg_free(&x);
            if (pair_inplace(k)) { /* the root's block is already in place */
                x = rimg_new(R == root ? blk * P : 8);
                if (R == root) {
                    for (int q = 0; q < P; q++) mt_place(p->rt, x.img + q * blk, p->rc, q, root);
                    mt_place(p->rt, x.buf + R * blk, p->rc, R, root);
                }
                if (COLL(Gather, Igather, R == root ? MPI_IN_PLACE : s, p->sc, p->st->type, R == root ? x.buf : NULL,
                         p->rc, p->rt->type, root, C))
                    CHECK_RIMG(x, "%s in place root %d %s on %s", COLLNAME(Gather, Igather), root,
                               pname(p, pn, sizeof(pn)), CN);
                rimg_free(&x);
            }
            tu_free(s);
        }
    }
}

static void t_scatter(void)
{
    char pn[128];
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < NPAIRS; k++) {
            const mpair_t *p = &PAIRS[k];
            long blk = (long)p->sc * p->st->ext;
            int *s = NULL, *s0 = NULL;
            if (R == root) {
                s = (int *)tu_alloc(blk * P * sizeof(int) + 4);
                s0 = (int *)tu_alloc(blk * P * sizeof(int) + 4);
                for (int q = 0; q < P; q++) mt_place(p->st, s + q * blk, p->sc, root, q);
                memcpy(s0, s, blk * P * sizeof(int));
            }
            rimg_t x = rimg_new((long)p->rc * p->rt->ext);
            mt_place(p->rt, x.img, p->rc, root, R);
            if (COLL(Scatter, Iscatter, s, p->sc, p->st->type, x.buf, p->rc, p->rt->type, root, C))
                CHECK_RIMG(x, "%s root %d %s on %s", COLLNAME(Scatter, Iscatter), root, pname(p, pn, sizeof(pn)), CN);
            if (R == root) CHECK(!memcmp(s, s0, blk * P * sizeof(int)), "root's send buffer modified");
            rimg_free(&x);
            if (pair_inplace(k)) { /* the root keeps its block in the send buffer */
                x = rimg_new((long)p->rc * p->rt->ext);
                mt_place(p->rt, x.img, p->rc, root, R);
                if (COLL(Scatter, Iscatter, s, p->sc, p->st->type, R == root ? MPI_IN_PLACE : x.buf, p->rc,
                         p->rt->type, root, C)) {
                    if (R == root) CHECK(!memcmp(s, s0, blk * P * sizeof(int)), "in place: root's send buffer modified");
                    else CHECK_RIMG(x, "%s in place root %d %s on %s", COLLNAME(Scatter, Iscatter), root,
                                    pname(p, pn, sizeof(pn)), CN);
                }
                rimg_free(&x);
            }
            tu_free(s), tu_free(s0);
        }
    }
}

static void t_allgather(void)
{
    char pn[128];
    for (int k = 0; k < NPAIRS; k++) {
        const mpair_t *p = &PAIRS[k];
        long blk = (long)p->rc * p->rt->ext;
        int *s = (int *)tu_alloc(mt_bytes(p->st, p->sc));
        mt_place(p->st, s, p->sc, R, R);
        rimg_t x = rimg_new(blk * P);
        for (int q = 0; q < P; q++) mt_place(p->rt, x.img + q * blk, p->rc, q, q);
        if (COLL(Allgather, Iallgather, s, p->sc, p->st->type, x.buf, p->rc, p->rt->type, C))
            CHECK_RIMG(x, "%s %s on %s", COLLNAME(Allgather, Iallgather), pname(p, pn, sizeof(pn)), CN);
        if (pair_inplace(k)) {
            tu_repoison(x.buf);
            mt_place(p->rt, x.buf + R * blk, p->rc, R, R);
            if (COLL(Allgather, Iallgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.buf, p->rc, p->rt->type, C))
                CHECK_RIMG(x, "%s in place %s on %s", COLLNAME(Allgather, Iallgather), pname(p, pn, sizeof(pn)), CN);
        }
        rimg_free(&x);
        tu_free(s);
    }
}

static void t_alltoall(void)
{
    char pn[128];
    for (int k = 0; k < NPAIRS; k++) {
        const mpair_t *p = &PAIRS[k];
        long sblk = (long)p->sc * p->st->ext, rblk = (long)p->rc * p->rt->ext;
        int *s = (int *)tu_alloc(sblk * P * sizeof(int) + 4);
        for (int d = 0; d < P; d++) mt_place(p->st, s + d * sblk, p->sc, R, d);
        rimg_t x = rimg_new(rblk * P);
        for (int q = 0; q < P; q++) mt_place(p->rt, x.img + q * rblk, p->rc, q, R);
        if (COLL(Alltoall, Ialltoall, s, p->sc, p->st->type, x.buf, p->rc, p->rt->type, C))
            CHECK_RIMG(x, "%s %s on %s", COLLNAME(Alltoall, Ialltoall), pname(p, pn, sizeof(pn)), CN);
        if (pair_inplace(k)) {
            tu_repoison(x.buf);
            for (int d = 0; d < P; d++) mt_place(p->rt, x.buf + d * rblk, p->rc, R, d);
            if (COLL(Alltoall, Ialltoall, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x.buf, p->rc, p->rt->type, C))
                CHECK_RIMG(x, "%s in place %s on %s", COLLNAME(Alltoall, Ialltoall), pname(p, pn, sizeof(pn)), CN);
        }
        rimg_free(&x);
        tu_free(s);
    }
}

/* displacements (in elements) laying the blocks out in reverse rank order, `gap` apart */
static void layout_rev(const int *counts, int n, int gap, int *displs, long *total)
{
    long cur = gap;
    for (int q = n - 1; q >= 0; q--) {
        displs[q] = (int)cur;
        cur += counts[q] + gap;
    }
    *total = cur;
}

static void t_gatherv(void)
{
    char pn[128];
    int *rcounts = (int *)malloc(P * sizeof(int)), *displs = (int *)malloc(P * sizeof(int));
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < NPAIRS; k++) {
            const mpair_t *p = &PAIRS[k];
            long total;
            for (int q = 0; q < P; q++) rcounts[q] = p->rc * cvar(q);
            layout_rev(rcounts, P, 1, displs, &total);
            int sc = p->sc * cvar(R);
            int *s = (int *)tu_alloc(mt_bytes(p->st, sc));
            mt_place(p->st, s, sc, R, root);
            for (int inplace = 0; inplace < 1 + pair_inplace(k); inplace++) {
                rimg_t x = rimg_new(R == root ? total * p->rt->ext : 4);
                if (R == root) {
                    for (int q = 0; q < P; q++) mt_place(p->rt, x.img + (long)displs[q] * p->rt->ext, rcounts[q], q, root);
                    if (inplace) mt_place(p->rt, x.buf + (long)displs[R] * p->rt->ext, rcounts[R], R, root);
                }
                const void *sb = inplace && R == root ? MPI_IN_PLACE : s;
                void *rb = (R == root || k % 2) ? x.buf : NULL;
                if (COLL(Gatherv, Igatherv, sb, sc, p->st->type, rb, rcounts, displs, p->rt->type, root, C))
                    CHECK_RIMG(x, "%s%s root %d %s on %s", COLLNAME(Gatherv, Igatherv), inplace ? " in place" : "", root,
                               pname(p, pn, sizeof(pn)), CN);
                rimg_free(&x);
            }
            tu_free(s);
        }
    }
    free(rcounts), free(displs);
}

static void t_scatterv(void)
{
    char pn[128];
    int *scounts = (int *)malloc(P * sizeof(int)), *displs = (int *)malloc(P * sizeof(int));
    for (int ri = 0; ri < nroots; ri++) {
        int root = roots[ri];
        for (int k = 0; k < NPAIRS; k++) {
            const mpair_t *p = &PAIRS[k];
            long total;
            for (int q = 0; q < P; q++) scounts[q] = p->sc * cvar(q);
            layout_rev(scounts, P, 2, displs, &total);
            int *s = NULL, *s0 = NULL;
            size_t sbytes = total * p->st->ext * sizeof(int);
            if (R == root) {
                s = (int *)tu_alloc(sbytes);
                for (int q = 0; q < P; q++) mt_place(p->st, s + (long)displs[q] * p->st->ext, scounts[q], root, q);
                s0 = (int *)tu_alloc(sbytes);
                memcpy(s0, s, sbytes);
            }
            int rc = p->rc * cvar(R);
            for (int inplace = 0; inplace < 1 + pair_inplace(k); inplace++) {
                rimg_t x = rimg_new((long)rc * p->rt->ext + 1);
                mt_place(p->rt, x.img, rc, root, R);
                void *rb = inplace && R == root ? MPI_IN_PLACE : x.buf;
                if (COLL(Scatterv, Iscatterv, s, scounts, displs, p->st->type, rb, rc, p->rt->type, root, C)) {
                    if (rb != MPI_IN_PLACE)
                        CHECK_RIMG(x, "%s%s root %d %s on %s", COLLNAME(Scatterv, Iscatterv), inplace ? " in place" : "",
                                   root, pname(p, pn, sizeof(pn)), CN);
                    if (R == root) CHECK(!memcmp(s, s0, sbytes), "root's send buffer modified");
                }
                rimg_free(&x);
            }
            tu_free(s), tu_free(s0);
        }
    }
    free(scounts), free(displs);
}

static void t_allgatherv(void)
{
    char pn[128];
    int *rcounts = (int *)malloc(P * sizeof(int)), *displs = (int *)malloc(P * sizeof(int));
    for (int k = 0; k < NPAIRS; k++) {
        const mpair_t *p = &PAIRS[k];
        long total;
        for (int q = 0; q < P; q++) rcounts[q] = p->rc * cvar(q);
        layout_rev(rcounts, P, 1, displs, &total);
        int sc = p->sc * cvar(R);
        int *s = (int *)tu_alloc(mt_bytes(p->st, sc));
        mt_place(p->st, s, sc, R, R);
        for (int inplace = 0; inplace < 1 + pair_inplace(k); inplace++) {
            rimg_t x = rimg_new(total * p->rt->ext);
            for (int q = 0; q < P; q++) mt_place(p->rt, x.img + (long)displs[q] * p->rt->ext, rcounts[q], q, q);
            if (inplace) mt_place(p->rt, x.buf + (long)displs[R] * p->rt->ext, rcounts[R], R, R);
            if (COLL(Allgatherv, Iallgatherv, inplace ? MPI_IN_PLACE : s, sc, p->st->type, x.buf, rcounts, displs,
                     p->rt->type, C))
                CHECK_RIMG(x, "%s%s %s on %s", COLLNAME(Allgatherv, Iallgatherv), inplace ? " in place" : "",
                           pname(p, pn, sizeof(pn)), CN);
            rimg_free(&x);
        }
        tu_free(s);
    }
    free(rcounts), free(displs);
}

/* alltoallv block counts: asymmetric with zeros; symmetric for the in-place form */
static int cv2(int a, int b) { return (a + 2 * b) % 3; }
static int cvs(int a, int b) { return (a + b) % 3 + (a == b); }

static void t_alltoallv(void)
{
    char pn[128];
    int *sc = (int *)malloc(P * sizeof(int)), *sd = (int *)malloc(P * sizeof(int));
    int *rc = (int *)malloc(P * sizeof(int)), *rd = (int *)malloc(P * sizeof(int));
    for (int k = 0; k < NPAIRS; k++) {
        const mpair_t *p = &PAIRS[k];
        for (int inplace = 0; inplace < 1 + pair_inplace(k); inplace++) {
            long stot, rtot;
            for (int q = 0; q < P; q++) {
                sc[q] = p->sc * (inplace ? cvs(R, q) : cv2(R, q));
                rc[q] = p->rc * (inplace ? cvs(q, R) : cv2(q, R));
            }
            layout_rev(sc, P, 1, sd, &stot);
            layout_rev(rc, P, 2, rd, &rtot);
            int *s = (int *)tu_alloc(stot * p->st->ext * sizeof(int));
            for (int d = 0; d < P; d++) mt_place(p->st, s + (long)sd[d] * p->st->ext, sc[d], R, d);
            rimg_t x = rimg_new(rtot * p->rt->ext);
            for (int q = 0; q < P; q++) mt_place(p->rt, x.img + (long)rd[q] * p->rt->ext, rc[q], q, R);
            if (inplace) /* the data for rank d sits where d's data will arrive */
                for (int d = 0; d < P; d++) mt_place(p->rt, x.buf + (long)rd[d] * p->rt->ext, rc[d], R, d);
            if (COLL(Alltoallv, Ialltoallv, inplace ? MPI_IN_PLACE : s, sc, sd, p->st->type, x.buf, rc, rd, p->rt->type, C))
                CHECK_RIMG(x, "%s%s %s on %s", COLLNAME(Alltoallv, Ialltoallv), inplace ? " in place" : "",
                           pname(p, pn, sizeof(pn)), CN);
            rimg_free(&x);
            tu_free(s);
        }
    }
    free(sc), free(sd), free(rc), free(rd);
}

/* alltoallw: between ranks a and b the pair's two sides alternate by (a+b) parity; byte
 * displacements lay the blocks out in reverse order, 16 bytes apart */
static void t_alltoallw(void)
{
    char pn[128];
    int *sc = (int *)malloc(P * sizeof(int)), *sd = (int *)malloc(P * sizeof(int));
    int *rc = (int *)malloc(P * sizeof(int)), *rd = (int *)malloc(P * sizeof(int));
    const mtype_t **smt = (const mtype_t **)malloc(P * sizeof(*smt)), **rmt = (const mtype_t **)malloc(P * sizeof(*rmt));
    MPI_Datatype *stypes = (MPI_Datatype *)malloc(P * sizeof(MPI_Datatype));
    MPI_Datatype *rtypes = (MPI_Datatype *)malloc(P * sizeof(MPI_Datatype));
    for (int k = 0; k < NPAIRS; k++) {
        const mpair_t *p = &PAIRS[k];
        for (int inplace = 0; inplace < 1 + pair_inplace(k); inplace++) {
            long sbytes = 16, rbytes = 16;
            for (int q = P - 1; q >= 0; q--) {
                int flip = (R + q) % 2;
                /* R sends to q: the side chosen by parity; q receives with the other side */
                const mpair_t *pp = p;
                int mult = inplace ? cvs(R, q) : cv2(R, q);
                smt[q] = flip ? pp->st : pp->rt;
                sc[q] = (flip ? pp->sc : pp->rc) * mult;
                int rmult = inplace ? cvs(q, R) : cv2(q, R);
                rmt[q] = inplace ? smt[q] : (flip ? pp->rt : pp->st);
                rc[q] = inplace ? sc[q] : (flip ? pp->rc : pp->sc) * rmult;
                sd[q] = (int)sbytes;
                sbytes += mt_bytes(smt[q], sc[q]) + 16;
                rd[q] = (int)rbytes;
                rbytes += mt_bytes(rmt[q], rc[q]) + 16;
                stypes[q] = smt[q]->type;
                rtypes[q] = rmt[q]->type;
            }
            int *s = (int *)tu_alloc(sbytes);
            for (int d = 0; d < P; d++) mt_place(smt[d], s + sd[d] / 4, sc[d], R, d);
            rimg_t x = rimg_new(rbytes / 4);
            for (int q = 0; q < P; q++) mt_place(rmt[q], x.img + rd[q] / 4, rc[q], q, R);
            if (inplace)
                for (int d = 0; d < P; d++) mt_place(rmt[d], x.buf + rd[d] / 4, rc[d], R, d);
            if (COLL(Alltoallw, Ialltoallw, inplace ? MPI_IN_PLACE : s, sc, sd, stypes, x.buf, rc, rd, rtypes, C))
                CHECK_RIMG(x, "%s%s %s on %s", COLLNAME(Alltoallw, Ialltoallw), inplace ? " in place" : "",
                           pname(p, pn, sizeof(pn)), CN);
            rimg_free(&x);
            tu_free(s);
        }
    }
    free(sc), free(sd), free(rc), free(rd), free(smt), free(rmt), free(stypes), free(rtypes);
}

/* No rank leaves the barrier before the late rank entered it (CLOCK_MONOTONIC is one clock
 * for all processes of the node). */
static void t_barrier(void)
{
    for (int late = P - 1, it = 0; it < 2; it++, late = 0) {
        double t_enter = 0, *all = (double *)malloc(2 * P * sizeof(double)), mine[2];
        if (R == late) {
            tu_sleep_ms(40);
            t_enter = tu_now();
        }
        COLL(Barrier, Ibarrier, C);
        mine[0] = t_enter;
        mine[1] = tu_now();
        OK(Allgather, mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, C);
        for (int q = 0; q < P; q++)
            CHECK(all[2 * q + 1] >= all[2 * late], "%s: rank %d left at %.6f before rank %d entered at %.6f on %s",
                  COLLNAME(Barrier, Ibarrier), q, all[2 * q + 1], late, all[2 * late], CN);
        free(all);
    }
}

static void run_all(MPI_Comm c, const char *name)
{
    set_comm(c, name);
    t_allreduce();
    t_reduce();
    t_reduce_scatter();
    t_reduce_scatter_block();
    t_scan(0);
    t_scan(1);
    t_bcast();
    t_gather();
    t_scatter();
    t_allgather();
    t_alltoall();
    t_gatherv();
    t_scatterv();
    t_allgatherv();
    t_alltoallv();
    t_alltoallw();
    t_barrier();
}
