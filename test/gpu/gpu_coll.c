/* gpu_coll: every collective on CUDA device buffers, checked against the real MPI on host
 * copies (PMPI_*, which ncclmpi never intercepts).
 *
 * A plain CUDA-aware MPI program: run it with libncclmpi preloaded on a non-CUDA-aware MPI.
 * For every case the device output and the host reference output start from the same poison
 * pattern (gaps included) and must end byte-identical. Inputs are small integers (also in the
 * float types), so sums and products are exact in any order and floats compare exactly.
 *
 *   gpu_coll [--quick] [--nb-only]
 * Exit 0 on success; prints the first mismatch of each failing case.
 */
#include "gpu_common.h"

#include <stdint.h>

enum { ALLREDUCE, REDUCE, BCAST, ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW, REDUCE_SCATTER,
       REDUCE_SCATTER_BLOCK, GATHER, GATHERV, SCATTER, SCATTERV, SCAN, EXSCAN, NCOLL };
static const char *const coll_name[NCOLL] = {
    "Allreduce", "Reduce", "Bcast", "Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Alltoallw",
    "Reduce_scatter", "Reduce_scatter_block", "Gather", "Gatherv", "Scatter", "Scatterv", "Scan", "Exscan"};
/* the blocking collectives that run on the shared GPU's window (Allreduce first) */
static const char *const on_gpu[] = {"Allreduce", "Reduce", "Bcast", "Allgather", "Allgatherv", "Alltoall", "Gather",
                                     "Scatter", "Reduce_scatter", "Reduce_scatter_block", "Scan", "Exscan"};
static int is_reduction(int c)
{
    return c == ALLREDUCE || c == REDUCE || c == REDUCE_SCATTER || c == REDUCE_SCATTER_BLOCK || c == SCAN || c == EXSCAN;
}

typedef struct {
    int coll;
    MPI_Datatype dt;
    MPI_Op op;
    int count;   /* per-rank element count */
    int inplace; /* MPI_IN_PLACE where the collective allows it */
    int root;
    int nb;      /* nonblocking form, waited together with a host request */
    MPI_Comm comm;
    const char *commname;
} tcase_t;

static int rank, size, failures, cases;

/* ---------------------------------------------------------------------------------------------
 * values: small integers of the datatype's kind, chosen per op so results stay exact
 * ------------------------------------------------------------------------------------------- */
typedef enum { K_INT, K_UINT, K_FLOAT, K_2INT, K_DOUBLE_INT, K_OTHER } kind_t;
static kind_t kind_of(MPI_Datatype dt, int *width)
{
    int sz;
    MPI_Type_size(dt, &sz);
    *width = sz;
    if (dt == MPI_FLOAT || dt == MPI_DOUBLE) return K_FLOAT;
    if (dt == MPI_UINT64_T || dt == MPI_UNSIGNED || dt == MPI_UNSIGNED_CHAR || dt == MPI_UINT8_T) return K_UINT;
    if (dt == MPI_INT8_T || dt == MPI_INT || dt == MPI_INT64_T || dt == MPI_SHORT || dt == MPI_LONG ||
        dt == MPI_INT32_T || dt == MPI_CHAR || dt == MPI_SIGNED_CHAR)
        return K_INT;
    if (dt == MPI_2INT) return K_2INT;
    if (dt == MPI_DOUBLE_INT) return K_DOUBLE_INT;
    return K_OTHER;
}

static long long pick(unsigned *state, MPI_Op op, int is_unsigned)
{
    *state = *state * 1103515245u + 12345u;
    unsigned r = (*state >> 16) & 0x7fff;
    if (op == MPI_PROD) {
        static const int v[] = {1, 2, -1, 1, 3, -2};
        long long x = v[r % 6];
        return is_unsigned ? (x < 0 ? -x : x) : x;
    }
    if (op == MPI_LAND || op == MPI_BXOR) return r % 4;
    long long x = (long long)(r % 101) - 50;
    if (x == 0) x = 7;
    return is_unsigned ? (x < 0 ? -x : x) : x;
}

/* fill n elements of dt at p (host) */
static void fill(void *p, MPI_Datatype dt, MPI_Op op, size_t n, unsigned seed)
{
    int w;
    kind_t k = kind_of(dt, &w);
    unsigned st = seed * 2654435761u + 17;
    for (size_t i = 0; i < n; i++) {
        long long v = pick(&st, op, k == K_UINT);
        switch (k) {
        case K_INT:
        case K_UINT:
            if (w == 1) ((int8_t *)p)[i] = (int8_t)v;
            else if (w == 2) ((int16_t *)p)[i] = (int16_t)v;
            else if (w == 4) ((int32_t *)p)[i] = (int32_t)v;
            else ((int64_t *)p)[i] = v;
            break;
        case K_FLOAT:
            if (w == 4) ((float *)p)[i] = (float)v;
            else ((double *)p)[i] = (double)v;
            break;
        case K_2INT:
            ((int *)p)[2 * i] = (int)v;
            ((int *)p)[2 * i + 1] = (int)(st % 1000);
            break;
        case K_DOUBLE_INT: {
            struct { double d; int i; } *q = p;
            q[i].d = (double)v;
            q[i].i = (int)(st % 1000);
            break;
        }
        default: { /* bytes of derived types */
            MPI_Aint lb, ext;
            MPI_Type_get_extent(dt, &lb, &ext);
            for (MPI_Aint b = 0; b < ext; b++) ((unsigned char *)p)[i * ext + b] = (unsigned char)(pick(&st, op, 1) + 3);
        }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * one collective, through MPI_ (device buffers, intercepted) or PMPI_ (host reference)
 * ------------------------------------------------------------------------------------------- */
#define CALL(pm, fn, ...) ((pm) ? PMPI_##fn(__VA_ARGS__) : MPI_##fn(__VA_ARGS__))

/* The reference's 8-bit MPI_SUM: a sum that wraps, as ncclmpi's paths compute it. Open MPI 4.1's
 * own 8-bit sum saturates in its vectorised part (AVX), which long enough vectors reach: at 12
 * ranks its MPI_Reduce_scatter of int8 sums differs from the wrapped sums. */
static void wrap8_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((uint8_t *)inout)[i] = (uint8_t)(((const uint8_t *)in)[i] + ((uint8_t *)inout)[i]);
}
static MPI_Op ref_op(int pm, MPI_Datatype dt, MPI_Op op)
{
    static MPI_Op wrap8 = MPI_OP_NULL;
    if (!pm || op != MPI_SUM || (dt != MPI_INT8_T && dt != MPI_UINT8_T)) return op;
    if (wrap8 == MPI_OP_NULL) MPI_Op_create(wrap8_sum, 1, &wrap8);
    return wrap8;
}

typedef struct {
    int *scounts, *sdispls, *rcounts, *rdispls, *wsd, *wrd;
    MPI_Datatype *wst, *wrt;
} layout_t;

static int run_coll(const tcase_t *t, int pm, const void *sb, void *rb, const layout_t *L, MPI_Request *req)
{
    int c = t->count, r = t->root;
    MPI_Comm cm = t->comm;
    MPI_Datatype dt = t->dt;
    const MPI_Op op = ref_op(pm, t->dt, t->op);
    const void *s = t->inplace ? MPI_IN_PLACE : sb;
    int crank;
    MPI_Comm_rank(cm, &crank);
    if (!t->nb) switch (t->coll) {
        case ALLREDUCE: return CALL(pm, Allreduce, s, rb, c, dt, op, cm);
        case REDUCE: return CALL(pm, Reduce, crank == r ? s : sb, crank == r ? rb : NULL, c, dt, op, r, cm);
        case BCAST: return CALL(pm, Bcast, rb, c, dt, r, cm);
        case ALLGATHER: return CALL(pm, Allgather, s, c, dt, rb, c, dt, cm);
        case ALLGATHERV: return CALL(pm, Allgatherv, s, L->rcounts[crank], dt, rb, L->rcounts, L->rdispls, dt, cm);
        case ALLTOALL: return CALL(pm, Alltoall, s, c, dt, rb, c, dt, cm);
        case ALLTOALLV: return CALL(pm, Alltoallv, s, L->scounts, L->sdispls, dt, rb, L->rcounts, L->rdispls, dt, cm);
        case ALLTOALLW: return CALL(pm, Alltoallw, s, L->scounts, L->wsd, L->wst, rb, L->rcounts, L->wrd, L->wrt, cm);
        case REDUCE_SCATTER: return CALL(pm, Reduce_scatter, s, rb, L->rcounts, dt, op, cm);
        case REDUCE_SCATTER_BLOCK: return CALL(pm, Reduce_scatter_block, s, rb, c, dt, op, cm);
        /* arguments the standard ignores on non-roots get NULL, -1 and MPI_DATATYPE_NULL */
        case GATHER:
            return CALL(pm, Gather, crank == r ? s : sb, c, dt, crank == r ? rb : NULL, crank == r ? c : -1,
                        crank == r ? dt : MPI_DATATYPE_NULL, r, cm);
        case GATHERV:
            return CALL(pm, Gatherv, crank == r ? s : sb, L->rcounts[crank], dt, crank == r ? rb : NULL,
                        crank == r ? L->rcounts : NULL, crank == r ? L->rdispls : NULL, crank == r ? dt : MPI_DATATYPE_NULL,
                        r, cm);
        case SCATTER:
            return CALL(pm, Scatter, crank == r ? sb : NULL, crank == r ? c : -1, crank == r ? dt : MPI_DATATYPE_NULL,
                        (t->inplace && crank == r) ? MPI_IN_PLACE : rb, c, dt, r, cm);
        case SCATTERV:
            return CALL(pm, Scatterv, crank == r ? sb : NULL, crank == r ? L->scounts : NULL,
                        crank == r ? L->sdispls : NULL, crank == r ? dt : MPI_DATATYPE_NULL,
                        (t->inplace && crank == r) ? MPI_IN_PLACE : rb, L->scounts[crank], dt, r, cm);
        case SCAN: return CALL(pm, Scan, s, rb, c, dt, op, cm);
        case EXSCAN: return CALL(pm, Exscan, s, rb, c, dt, op, cm);
        }
    switch (t->coll) {
    case ALLREDUCE: return CALL(pm, Iallreduce, s, rb, c, dt, op, cm, req);
    case REDUCE: return CALL(pm, Ireduce, crank == r ? s : sb, crank == r ? rb : NULL, c, dt, op, r, cm, req);
    case BCAST: return CALL(pm, Ibcast, rb, c, dt, r, cm, req);
    case ALLGATHER: return CALL(pm, Iallgather, s, c, dt, rb, c, dt, cm, req);
    case ALLTOALL: return CALL(pm, Ialltoall, s, c, dt, rb, c, dt, cm, req);
    case ALLTOALLV: return CALL(pm, Ialltoallv, s, L->scounts, L->sdispls, dt, rb, L->rcounts, L->rdispls, dt, cm, req);
    case REDUCE_SCATTER_BLOCK: return CALL(pm, Ireduce_scatter_block, s, rb, c, dt, op, cm, req);
    case GATHERV:
        return CALL(pm, Igatherv, crank == r ? s : sb, L->rcounts[crank], dt, crank == r ? rb : NULL,
                    crank == r ? L->rcounts : NULL, crank == r ? L->rdispls : NULL, crank == r ? dt : MPI_DATATYPE_NULL,
                    r, cm, req);
    case SCAN: return CALL(pm, Iscan, s, rb, c, dt, op, cm, req);
    default: return MPI_ERR_OTHER;
    }
}

/* ---------------------------------------------------------------------------------------------
 * buffer sizes and in-place input placement
 * ------------------------------------------------------------------------------------------- */
static void make_layout(const tcase_t *t, int n, layout_t *L, size_t *sn, size_t *rn)
{
    int c = t->count;
    L->scounts = calloc(n, sizeof(int));
    L->sdispls = calloc(n, sizeof(int));
    L->rcounts = calloc(n, sizeof(int));
    L->rdispls = calloc(n, sizeof(int));
    L->wsd = calloc(n, sizeof(int));
    L->wrd = calloc(n, sizeof(int));
    L->wst = calloc(n, sizeof(MPI_Datatype));
    L->wrt = calloc(n, sizeof(MPI_Datatype));
    int crank;
    MPI_Comm_rank(t->comm, &crank);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t->dt, &lb, &ext);
    /* v-variants: count c + p for peer p, one element of gap between blocks */
    int so = 0, ro = 0;
    for (int p = 0; p < n; p++) {
        switch (t->coll) {
        case ALLGATHERV:
        case GATHERV:
        case SCATTERV:
            L->rcounts[p] = L->scounts[p] = c + p;
            L->rdispls[p] = L->sdispls[p] = ro;
            ro += c + p + 1;
            so = ro;
            break;
        case ALLTOALLV:
        case ALLTOALLW:
            L->scounts[p] = c + (crank + p) % 3; /* what I send to p; p receives the same from me */
            L->rcounts[p] = c + (p + crank) % 3;
            L->sdispls[p] = so;
            L->rdispls[p] = ro;
            so += L->scounts[p] + 1;
            ro += L->rcounts[p] + 1;
            L->wsd[p] = L->sdispls[p] * (int)ext;
            L->wrd[p] = L->rdispls[p] * (int)ext;
            L->wst[p] = L->wrt[p] = t->dt;
            break;
        case REDUCE_SCATTER:
            L->rcounts[p] = c + (p % 2);
            ro += L->rcounts[p];
            break;
        default:
            break;
        }
    }
    size_t s = 0, r = 0;
    switch (t->coll) {
    case ALLREDUCE: case REDUCE: case SCAN: case EXSCAN: s = r = c; break;
    case BCAST: s = r = c; break;
    case ALLGATHER: s = c; r = (size_t)c * n; break;
    case ALLGATHERV: s = L->rcounts[crank]; r = ro; break;
    case ALLTOALL: s = r = (size_t)c * n; break;
    case ALLTOALLV: case ALLTOALLW: s = so; r = ro; break;
    case REDUCE_SCATTER: s = ro; r = t->inplace ? ro : (size_t)L->rcounts[crank]; break;
    case REDUCE_SCATTER_BLOCK: s = (size_t)c * n; r = t->inplace ? (size_t)c * n : c; break;
    case GATHER: s = c; r = (size_t)c * n; break;
    case GATHERV: s = L->rcounts[crank]; r = ro; break;
    case SCATTER: s = (size_t)c * n; r = c; break;
    case SCATTERV: s = so; r = L->scounts[crank]; break;
    }
    *sn = s;
    *rn = r;
}

static void free_layout(layout_t *L)
{
    free(L->scounts); free(L->sdispls); free(L->rcounts); free(L->rdispls);
    free(L->wsd); free(L->wrd); free(L->wst); free(L->wrt);
}

/* With MPI_IN_PLACE the input lives in the receive buffer: put it where the standard says. */
static void place_inplace_input(const tcase_t *t, int crank, const char *sb, char *rb, size_t ext, const layout_t *L)
{
    switch (t->coll) {
    case ALLREDUCE: case SCAN: case EXSCAN: case REDUCE: case REDUCE_SCATTER: case REDUCE_SCATTER_BLOCK:
    case ALLTOALL: {
        size_t n = 0;
        int sz;
        MPI_Comm_size(t->comm, &sz);
        if (t->coll == REDUCE_SCATTER) for (int p = 0; p < sz; p++) n += L->rcounts[p];
        else if (t->coll == REDUCE_SCATTER_BLOCK || t->coll == ALLTOALL) n = (size_t)t->count * sz;
        else n = t->count;
        memcpy(rb, sb, n * ext);
        break;
    }
    case ALLGATHER: case GATHER:
        memcpy(rb + (size_t)crank * t->count * ext, sb, (size_t)t->count * ext);
        break;
    case ALLGATHERV: case GATHERV:
        memcpy(rb + (size_t)L->rdispls[crank] * ext, sb, (size_t)L->rcounts[crank] * ext);
        break;
    default:
        break;
    }
}

static int inplace_allowed(int coll) { return coll != BCAST && coll != ALLTOALLV && coll != ALLTOALLW; }

static const char *op_name(MPI_Op op)
{
    if (op == MPI_SUM) return "SUM";
    if (op == MPI_PROD) return "PROD";
    if (op == MPI_MIN) return "MIN";
    if (op == MPI_MAX) return "MAX";
    if (op == MPI_LAND) return "LAND";
    if (op == MPI_BXOR) return "BXOR";
    if (op == MPI_MAXLOC) return "MAXLOC";
    if (op == MPI_MINLOC) return "MINLOC";
    return "-";
}

/* ---------------------------------------------------------------------------------------------
 * one case: device run vs host reference
 * ------------------------------------------------------------------------------------------- */
static const char *only; /* --only NAME: the cases of one collective (to bisect a sanitizer report) */
static int trace;        /* --trace: rank 0 names each case before running it */

/* In place, MPI_Reduce_scatter(_block) defines only the rank's own block at the start of the
 * receive buffer: the rest held input, and an MPI may leave anything there (Open MPI reduces the
 * whole vector into rank 0's buffer first). 1 when got and want differ only there. */
static int undefined_only(const tcase_t *t, const layout_t *L, int crank, MPI_Aint ext, const char *got,
                          const char *want, size_t rbytes)
{
    if (!t->inplace || (t->coll != REDUCE_SCATTER && t->coll != REDUCE_SCATTER_BLOCK)) return 0;
    size_t mine = (size_t)(t->coll == REDUCE_SCATTER ? L->rcounts[crank] : t->count) * (size_t)ext;
    size_t whole = rbytes - 64; /* the input, then the tail that catches overruns */
    return memcmp(got, want, mine) == 0 && memcmp(got + whole, want + whole, 64) == 0;
}

static void run_case(const tcase_t *t)
{
    if (only && strcmp(coll_name[t->coll], only)) return; /* the same on every rank */
    if (trace && rank == 0) {
        char tname[MPI_MAX_OBJECT_NAME] = "";
        int tl = 0;
        MPI_Type_get_name(t->dt, tname, &tl);
        printf("gpu_coll: case %d: %s%s type=%s op=%s count=%d inplace=%d root=%d comm=%s\n", cases, t->nb ? "I" : "",
               coll_name[t->coll], tl ? tname : "derived", op_name(t->op), t->count, t->inplace, t->root, t->commname);
        fflush(stdout);
    }
    int n, crank;
    MPI_Comm_size(t->comm, &n);
    MPI_Comm_rank(t->comm, &crank);
    layout_t L;
    size_t sn, rn;
    make_layout(t, n, &L, &sn, &rn);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t->dt, &lb, &ext);
    size_t sbytes = sn * ext + 64, rbytes = rn * ext + 64; /* + tail to catch overruns */
    char *hs = malloc(sbytes), *hr = malloc(rbytes), *got = malloc(rbytes);
    memset(hs, 0x3c, sbytes);
    fill(hs, t->dt, t->op, sn, 1000u * (unsigned)rank + 7u * (unsigned)t->coll + (unsigned)t->count);
    memset(hr, 0xa5, rbytes); /* poison: the same in both outputs */
    int root_here = crank == t->root;
    int inplace = t->inplace && (!(t->coll == REDUCE || t->coll == GATHER || t->coll == GATHERV) || root_here);
    tcase_t tt = *t;
    tt.inplace = inplace && t->coll != SCATTER && t->coll != SCATTERV;
    if (t->coll == SCATTER || t->coll == SCATTERV) tt.inplace = t->inplace; /* handled in run_coll at root */
    if (tt.inplace) place_inplace_input(&tt, crank, hs, hr, ext, &L);
    if (t->coll == BCAST && root_here) memcpy(hr, hs, (size_t)t->count * ext);
    void *ds, *dr;
    CUDACHECK(cudaMalloc(&ds, sbytes));
    CUDACHECK(cudaMalloc(&dr, rbytes));
    CUDACHECK(cudaMemcpy(ds, hs, sbytes, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemcpy(dr, hr, rbytes, cudaMemcpyHostToDevice));

    /* a host request in flight beside the device one (mixed arrays in Waitall) */
    int hsend = rank, hrecv = -1;
    MPI_Request reqs[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int rc;
    if (t->nb) {
        MPI_Irecv(&hrecv, 1, MPI_INT, (rank + size - 1) % size, 99, MPI_COMM_WORLD, &reqs[1]);
        MPI_Isend(&hsend, 1, MPI_INT, (rank + 1) % size, 99, MPI_COMM_WORLD, &reqs[2]);
    }
    rc = run_coll(&tt, 0, ds, dr, &L, &reqs[0]);
    if (t->nb && rc == MPI_SUCCESS) rc = MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE);
    MPI_Request rref = MPI_REQUEST_NULL;
    int rcref = run_coll(&tt, 1, hs, hr, &L, &rref);
    if (t->nb) PMPI_Wait(&rref, MPI_STATUS_IGNORE);
    CUDACHECK(cudaMemcpy(got, dr, rbytes, cudaMemcpyDeviceToHost));
    cases++;
    int bad = 0;
    char what[320], tname[MPI_MAX_OBJECT_NAME] = "";
    int tn;
    MPI_Type_get_name(t->dt, tname, &tn);
    snprintf(what, sizeof(what), "%s%s type=%s op=%s count=%d inplace=%d root=%d comm=%s", t->nb ? "I" : "",
             coll_name[t->coll], tn ? tname : "derived", op_name(t->op), t->count, tt.inplace, t->root, t->commname);
    if (rc != MPI_SUCCESS || rcref != MPI_SUCCESS) {
        fprintf(stderr, "[rank %d] FAIL %s: rc=%d ref rc=%d\n", rank, what, rc, rcref);
        bad = 1;
    } else if (t->nb && hrecv != (rank + size - 1) % size) {
        fprintf(stderr, "[rank %d] FAIL %s: host request in the same Waitall got %d\n", rank, what, hrecv);
        bad = 1;
    } else if (memcmp(got, hr, rbytes) != 0 && !undefined_only(&tt, &L, crank, ext, got, hr, rbytes)) {
        size_t i = 0;
        while (got[i] == hr[i]) i++;
        fprintf(stderr, "[rank %d] FAIL %s: first differing byte %zu of %zu (got 0x%02x, want 0x%02x)\n", rank, what, i,
                rbytes, (unsigned char)got[i], (unsigned char)hr[i]);
        bad = 1;
    }
    failures += bad;
    CUDACHECK(cudaFree(ds));
    CUDACHECK(cudaFree(dr));
    free(hs); free(hr); free(got);
    free_layout(&L);
}

/* ---------------------------------------------------------------------------------------------
 * the matrix
 * ------------------------------------------------------------------------------------------- */
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int quick = 0, ndev;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--trace")) trace = 1;
    int distinct = gpu_select(&ndev);

    MPI_Comm split, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &split);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    struct { MPI_Comm c; const char *name; } comms[] = {{MPI_COMM_WORLD, "world"}, {split, "split"}, {dup, "dup"}};

    MPI_Datatype contig3, vec;
    MPI_Type_contiguous(3, MPI_INT, &contig3);
    MPI_Type_commit(&contig3);
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec); /* non-contiguous: staged */
    MPI_Type_commit(&vec);
    MPI_Type_set_name(contig3, "contiguous(3,INT)");
    MPI_Type_set_name(vec, "vector(2,1,2,INT)");

    MPI_Datatype red_types[] = {MPI_INT8_T, MPI_INT, MPI_INT64_T, MPI_UINT64_T, MPI_FLOAT, MPI_DOUBLE, MPI_SHORT};
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_BXOR};
    MPI_Datatype move_types[] = {MPI_INT, MPI_DOUBLE, MPI_INT8_T, contig3, vec};
    int counts[] = {0, 1, 7, (1 << 20) + 3};
    int ncounts = quick ? 3 : 4;

    for (int ci = 0; ci < 3; ci++) {
        MPI_Comm cm = comms[ci].c;
        int n, cr;
        MPI_Comm_size(cm, &n);
        MPI_Comm_rank(cm, &cr);
        int roots[2] = {0, n - 1};
        for (int coll = 0; coll < NCOLL; coll++) {
            int red = is_reduction(coll);
            int ntypes = red ? 7 : 5;
            for (int ti = 0; ti < ntypes; ti++) {
                MPI_Datatype dt = red ? red_types[ti] : move_types[ti];
                int nops = red ? 6 : 1;
                for (int oi = 0; oi < nops; oi++) {
                    MPI_Op op = red ? ops[oi] : MPI_OP_NULL;
                    int w;
                    kind_t k = kind_of(dt, &w);
                    if ((op == MPI_LAND || op == MPI_BXOR) && k == K_FLOAT) continue; /* not defined by MPI */
                    for (int cn = 0; cn < ncounts; cn++) {
                        int count = counts[cn];
                        /* the big count: one representative type per family, every op once */
                        if (count > 1000 && !(dt == MPI_FLOAT || dt == MPI_INT || (red && dt == MPI_SHORT && op == MPI_SUM)))
                            continue;
                        if (count > 1000 && (coll == ALLTOALLW || (comms[ci].c != MPI_COMM_WORLD))) continue;
                        for (int ip = 0; ip < 2; ip++) {
                            if (ip && !inplace_allowed(coll)) continue;
                            if (ip && count > 1000) continue;
                            int rooted = coll == REDUCE || coll == BCAST || coll == GATHER || coll == GATHERV ||
                                         coll == SCATTER || coll == SCATTERV;
                            for (int ri = 0; ri < (rooted ? 2 : 1); ri++) {
                                tcase_t t = {coll, dt, op, count, ip, roots[ri], 0, cm, comms[ci].name};
                                run_case(&t);
                            }
                        }
                    }
                }
            }
        }
        /* nonblocking forms, waited in a Waitall with a host Isend/Irecv and MPI_REQUEST_NULL */
        int nbcolls[] = {ALLREDUCE, REDUCE, BCAST, ALLGATHER, ALLTOALL, ALLTOALLV, REDUCE_SCATTER_BLOCK, GATHERV, SCAN};
        for (size_t i = 0; i < sizeof(nbcolls) / sizeof(nbcolls[0]); i++)
            for (int cn = 1; cn < 3; cn++) {
                int coll = nbcolls[i];
                tcase_t t = {coll, is_reduction(coll) ? MPI_INT : MPI_DOUBLE, MPI_SUM, counts[cn] * 100 + 3, 0, n - 1, 1,
                             cm, comms[ci].name};
                run_case(&t);
                t.dt = MPI_FLOAT;
                t.op = is_reduction(coll) ? MPI_MAX : MPI_OP_NULL;
                run_case(&t);
            }
    }
    /* MAXLOC / MINLOC on pair types: staged */
    {
        MPI_Datatype pt[] = {MPI_2INT, MPI_DOUBLE_INT};
        MPI_Op lops[] = {MPI_MAXLOC, MPI_MINLOC};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
                for (int cn = 1; cn < 3; cn++) {
                    tcase_t t = {ALLREDUCE, pt[a], lops[b], counts[cn], 0, 0, 0, MPI_COMM_WORLD, "world"};
                    run_case(&t);
                    t.coll = REDUCE;
                    t.root = size - 1;
                    run_case(&t);
                }
    }

    /* routes: NCCL when every rank has its own GPU, staged when ranks share one */
    nm_stats_view_t s = gpu_stats("Allreduce");
    int route_bad = 0;
    if (s.calls != (unsigned long long)-1 && !only) {
        /* NCCL exactly when one of this rank's communicators has distinct GPUs: always with one
         * GPU per rank; on a shared GPU only through a one-rank split communicator; never when
         * NCCLMPI_FORCE_STAGED=1 */
        const char *fs = getenv("NCCLMPI_FORCE_STAGED");
        int forced = fs && fs[0] == '1', ssize;
        MPI_Comm_size(split, &ssize);
        int expect_nccl = !forced && (distinct || ssize == 1);
        if (expect_nccl != (s.route[NCCLMPI_ROUTE_NCCL] != 0)) route_bad = 1;
        /* LAND/BXOR/MAXLOC/int16 stage, except the small ones the one-shot kernels run (and, on a
         * shared GPU, those from NCCLMPI_SHARED_MIN bytes, through CUDA IPC) */
        if (s.route[NCCLMPI_ROUTE_STAGED] == 0 && s.oneshot == 0 && s.ipc == 0) route_bad = 1;
        /* NM_EXPECT_SHARED=1: ranks share the GPU and Allreduces run on it (SHARED_MIN=0; user
         * ops and types the kernels lack stay staged) */
        const char *es = getenv("NM_EXPECT_SHARED");
        if (es && es[0] == '1' && !distinct && !forced && s.ipc == 0) route_bad = 1;
        /* ... and so do the other blocking collectives whose counts every rank knows */
        for (size_t i = 1; es && es[0] == '1' && !distinct && !forced && i < sizeof(on_gpu) / sizeof(on_gpu[0]); i++) {
            nm_stats_view_t v = gpu_stats(on_gpu[i]);
            if (v.calls != (unsigned long long)-1 && v.ipc == 0) {
                fprintf(stderr, "[rank %d] FAIL routes: no MPI_%s ran on the shared GPU (staged=%llu host=%llu)\n", rank,
                        on_gpu[i], v.route[NCCLMPI_ROUTE_STAGED], v.route[NCCLMPI_ROUTE_HOST]);
                route_bad = 1;
            }
        }
        if (route_bad)
            fprintf(stderr, "[rank %d] FAIL routes: Allreduce nccl=%llu oneshot=%llu ipc=%llu staged=%llu host=%llu (distinct GPUs: %d, "
                    "split size %d, NCCL expected: %d)\n", rank, s.route[NCCLMPI_ROUTE_NCCL], s.oneshot, s.ipc, s.route[NCCLMPI_ROUTE_STAGED],
                    s.route[NCCLMPI_ROUTE_HOST], distinct, ssize, expect_nccl);
        failures += route_bad;
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && s.ipc) { /* what ran on the shared GPU, by call */

        printf("gpu_coll: on the shared GPU:");
        for (size_t i = 0; i < sizeof(on_gpu) / sizeof(on_gpu[0]); i++) printf(" %s %llu", on_gpu[i], gpu_stats(on_gpu[i]).ipc);
        printf("\n");
    }
    if (rank == 0)
        printf("gpu_coll: %d ranks, %d GPU(s), %s, %d cases per rank, %d failure(s); Allreduce routes nccl=%llu oneshot=%llu "
               "ipc=%llu staged=%llu\n", size, ndev, distinct ? "one GPU per rank" : "ranks share GPUs", cases, total,
               s.route[NCCLMPI_ROUTE_NCCL], s.oneshot, s.ipc, s.route[NCCLMPI_ROUTE_STAGED]);
    MPI_Type_free(&contig3);
    MPI_Type_free(&vec);
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return total ? 1 : 0;
}
