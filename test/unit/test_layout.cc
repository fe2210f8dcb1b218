// test_layout: datatype layouts (src/core/dtype/layout.cc) against the real MPI_Pack/MPI_Unpack.
// Random datatypes (seeded) nested 1-3 deep from every constructor the decoder knows, random
// counts 0-5: layout_pack_host must produce MPI_Pack's bytes, and layout_unpack_host must leave a
// pre-poisoned buffer exactly as MPI_Unpack leaves an identical one. Then fixed shapes (matrix
// column, transposed column, padded struct, 3-D subarray, negative-lb hindexed) and how well
// simple shapes compress. Runs as a singleton MPI process; needs no GPU.
//   test_layout [SEED [NTYPES]]
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/dtype/layout.h"

using ncclmpi::Layout;
using ncclmpi::LayoutRun;

static int failures;
#define CHECK(c)                                                                              \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);             \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static std::mt19937_64 rng;
static int rnd(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }  // [lo, hi]

static bool is_named(MPI_Datatype t)
{
    int ni, na, nd, comb;
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    return comb == MPI_COMBINER_NAMED;
}
static void release(MPI_Datatype *t)
{
    if (!is_named(*t)) MPI_Type_free(t);
}

// ---- random datatypes ------------------------------------------------------------------------

struct Gen {
    MPI_Datatype t;
    std::string desc;
    int rc = MPI_SUCCESS;  // the constructor's
    // Holds a shape Open MPI 4.1 builds against the standard (a byte stride of -1 in a vector or
    // hvector; a struct member of size 0): layout_build may refuse it (PMPI_Pack then packs).
    bool suspect = false;
};
static int n_rejected;  // constructions the MPI refused (replaced by a dup of the child)

// A 16-byte leaf. Open MPI 5 and MPICH pack a non-contiguous MPI_LONG_DOUBLE as its 10 value
// bytes and leave out (unpack: skip) the 6 bytes of x87 padding, which ncclmpi's layouts copy like
// any other byte; the values agree, the padding does not. There a 16-byte type without padding
// takes its place (in the same slot: the seed still draws the same types).
#if (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5) || defined(MPICH_VERSION)
#define NM_LEAF_16 {MPI_C_DOUBLE_COMPLEX, "double_complex"}
#else
#define NM_LEAF_16 {MPI_LONG_DOUBLE, "long_double"}
#endif

static Gen leaf()
{
    static const struct { MPI_Datatype t; const char *n; } leaves[] = {
        {MPI_CHAR, "char"},   {MPI_SHORT, "short"},         {MPI_INT, "int"},
        {MPI_FLOAT, "float"}, {MPI_DOUBLE, "double"},       {MPI_SHORT_INT, "short_int"},
        {MPI_2INT, "2int"},   {MPI_DOUBLE_INT, "double_int"}, NM_LEAF_16,
    };
    int i = rnd(0, sizeof leaves / sizeof leaves[0] - 1);
    return {leaves[i].t, leaves[i].n, MPI_SUCCESS, false};
}

static std::string ilist(const int *v, int n)
{
    std::string s = "{";
    for (int i = 0; i < n; i++) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "}";
}
static std::string alist(const MPI_Aint *v, int n)
{
    std::string s = "{";
    for (int i = 0; i < n; i++) s += (i ? "," : "") + std::to_string((long long)v[i]);
    return s + "}";
}

static Gen gen(int depth);

static Gen gen_darray(Gen c)
{
    int nd = rnd(1, 3), gs[3], dist[3], darg[3], ps[3], size = 1;
    for (int d = 0; d < nd; d++) {
        gs[d] = rnd(1, 7);
        dist[d] = std::vector<int>{MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_NONE}[rnd(0, 2)];
        ps[d] = dist[d] == MPI_DISTRIBUTE_NONE ? 1 : rnd(1, 3);
        darg[d] = MPI_DISTRIBUTE_DFLT_DARG;
        if (dist[d] == MPI_DISTRIBUTE_BLOCK && rnd(0, 1)) darg[d] = (gs[d] + ps[d] - 1) / ps[d] + rnd(0, 2);
        if (dist[d] == MPI_DISTRIBUTE_CYCLIC && rnd(0, 1)) darg[d] = rnd(1, 3);
        size *= ps[d];
    }
    int rank = rnd(0, size - 1), order = rnd(0, 1) ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
    Gen g;
    g.rc = MPI_Type_create_darray(size, rank, nd, gs, dist, darg, ps, order, c.t, &g.t);
    g.desc = "darray(" + std::to_string(size) + "," + std::to_string(rank) + "," + ilist(gs, nd) + "," +
             ilist(dist, nd) + "," + ilist(darg, nd) + "," + ilist(ps, nd) + (order == MPI_ORDER_C ? ",C," : ",F,") +
             c.desc + ")";
    return g;
}

static Gen gen_indexed(int kind, Gen c)
{
    int n = rnd(0, 4), bl[4], di[4], b = rnd(0, 3);
    MPI_Aint da[4];
    for (int i = 0; i < n; i++) bl[i] = rnd(0, 3), di[i] = rnd(-3, 8), da[i] = rnd(-50, 80);
    Gen g;
    switch (kind) {
    case 0:
        g.rc = MPI_Type_indexed(n, bl, di, c.t, &g.t);
        g.desc = "indexed(" + ilist(bl, n) + "," + ilist(di, n);
        break;
    case 1:
        g.rc = MPI_Type_create_hindexed(n, bl, da, c.t, &g.t);
        g.desc = "hindexed(" + ilist(bl, n) + "," + alist(da, n);
        break;
    case 2:
        g.rc = MPI_Type_create_indexed_block(n, b, di, c.t, &g.t);
        g.desc = "indexed_block(" + std::to_string(b) + "," + ilist(di, n);
        break;
    default:
        g.rc = MPI_Type_create_hindexed_block(n, b, da, c.t, &g.t);
        g.desc = "hindexed_block(" + std::to_string(b) + "," + alist(da, n);
    }
    g.desc += "," + c.desc + ")";
    return g;
}

static Gen gen_struct(int depth)
{
    int n = rnd(1, 3), bl[3];
    MPI_Aint da[3];
    MPI_Datatype ts[3];
    Gen kids[3];
    std::string d = "struct(";
    bool suspect = false;
    for (int i = 0; i < n; i++) {
        kids[i] = rnd(0, 1) ? gen(depth - 1) : leaf();
        ts[i] = kids[i].t;
        bl[i] = rnd(0, 2);
        da[i] = rnd(-20, 60);
        int size;
        MPI_Type_size(ts[i], &size);
        suspect |= kids[i].suspect || (bl[i] > 0 && size == 0);
        d += (i ? "," : "") + std::to_string(bl[i]) + "@" + std::to_string((long long)da[i]) + ":" + kids[i].desc;
    }
    Gen g;
    g.rc = MPI_Type_create_struct(n, bl, da, ts, &g.t);
    for (int i = 0; i < n; i++) release(&kids[i].t);
    g.desc = d + ")";
    g.suspect = suspect;
    return g;
}

// A datatype `depth` constructors deep (0: a predefined type).
static Gen gen(int depth)
{
    if (depth <= 0) return leaf();
    int kind = rnd(0, 13);
    if (kind == 13) return gen_struct(depth);
    Gen c = rnd(0, 3) ? gen(depth - 1) : leaf(), g;
    int n = rnd(0, 4), b = rnd(0, 3), s = rnd(-4, 6);
    MPI_Aint clb, cext;
    MPI_Type_get_extent(c.t, &clb, &cext);
    switch (kind) {
    case 0:
        g.rc = MPI_Type_contiguous(n, c.t, &g.t);
        g.desc = "contiguous(" + std::to_string(n) + "," + c.desc + ")";
        break;
    case 1:
    case 2:
        g.rc = MPI_Type_vector(n, b, s, c.t, &g.t);
        g.suspect = n > 1 && s * cext == -1;
        g.desc = "vector(" + std::to_string(n) + "," + std::to_string(b) + "," + std::to_string(s) + "," + c.desc + ")";
        break;
    case 3: {
        MPI_Aint hs = rnd(0, 3) ? rnd(-40, 60) : -1;
        g.suspect = n > 1 && hs == -1;
        g.rc = MPI_Type_create_hvector(n, b, hs, c.t, &g.t);
        g.desc = "hvector(" + std::to_string(n) + "," + std::to_string(b) + "," + std::to_string((long long)hs) + "," +
                 c.desc + ")";
        break;
    }
    case 4: case 5: case 6: case 7: g = gen_indexed(kind - 4, c); break;
    case 8:
    case 9: {
        MPI_Aint lb, ext, tlb, text;
        MPI_Type_get_extent(c.t, &lb, &ext);
        MPI_Type_get_true_extent(c.t, &tlb, &text);
        MPI_Aint nlb = rnd(0, 2) ? lb : rnd(-16, 16), next = rnd(0, 2) ? text + rnd(0, 16) : rnd(1, 24);
        g.rc = MPI_Type_create_resized(c.t, nlb, next, &g.t);
        g.desc = "resized(" + std::to_string((long long)nlb) + "," + std::to_string((long long)next) + "," + c.desc +
                 ")";
        break;
    }
    case 10: {
        int nd = rnd(1, 3), sz[3], sub[3], st[3], order = rnd(0, 1) ? MPI_ORDER_C : MPI_ORDER_FORTRAN;
        for (int d = 0; d < nd; d++) sz[d] = rnd(1, 5), sub[d] = rnd(1, sz[d]), st[d] = rnd(0, sz[d] - sub[d]);
        g.rc = MPI_Type_create_subarray(nd, sz, sub, st, order, c.t, &g.t);
        g.desc = "subarray(" + ilist(sz, nd) + "," + ilist(sub, nd) + "," + ilist(st, nd) +
                 (order == MPI_ORDER_C ? ",C," : ",F,") + c.desc + ")";
        break;
    }
    case 11: g = gen_darray(c); break;
    default:
        g.rc = MPI_Type_dup(c.t, &g.t);
        g.desc = "dup(" + c.desc + ")";
    }
    if (g.rc != MPI_SUCCESS) {  // e.g. Open MPI refuses a darray of a zero-size type
        n_rejected++;
        g.rc = MPI_Type_dup(c.t, &g.t);
        g.desc = "dup(" + c.desc + ")";
    }
    g.suspect |= c.suspect;
    release(&c.t);
    return g;
}

// ---- the comparison against MPI --------------------------------------------------------------

// Do two blocks of the layout overlap? (Unpacking such a type is erroneous in MPI.)
static bool overlapping(const Layout &l)
{
    std::vector<std::pair<MPI_Aint, MPI_Aint>> iv;
    for (const LayoutRun &r : l.runs)
        for (size_t i = 0; i < r.count; i++) iv.push_back({r.off + (MPI_Aint)i * r.stride, (MPI_Aint)r.len});
    std::sort(iv.begin(), iv.end());
    for (size_t i = 1; i < iv.size(); i++)
        if (iv[i - 1].first + iv[i - 1].second > iv[i].first) return true;
    return false;
}

static int n_tested, n_overlap, n_multi_run, n_odd_stride, n_refused;

// Pack and unpack `count` elements of dt both ways; returns false on a mismatch. A refusal is a
// failure unless the type is `suspect` (see Gen).
static bool compare(MPI_Datatype dt, int count, const std::string &desc, Layout *lout = nullptr,
                    bool suspect = false)
{
    Layout l;
    if (!ncclmpi::layout_build(dt, count, size_t(1) << 20, &l)) {
        if (suspect) return n_refused++, true;
        fprintf(stderr, "layout_build failed: %s count %d\n", desc.c_str(), count);
        failures++;
        return false;
    }
    n_tested++;
    MPI_Aint lb, ext, tlb, text;
    MPI_Type_get_extent(dt, &lb, &ext);
    MPI_Type_get_true_extent(dt, &tlb, &text);
    int size;
    MPI_Type_size(dt, &size);
    MPI_Aint lo = 0, hi = 0;  // bytes the typemap may touch, relative to the buffer pointer
    for (int k = 0; k < count && size > 0; k++) {  // (the true bounds of an empty type are junk)
        lo = std::min(lo, k * ext + tlb);
        hi = std::max(hi, k * ext + tlb + text);
    }
    const MPI_Aint margin = 64;
    size_t span = hi - lo + 2 * margin;
    std::vector<unsigned char> buf(span), u1(span), u2(span);
    for (auto &c : buf) c = (unsigned char)rng();
    char *base = (char *)buf.data() + margin - lo;
    int psize = 0, pos = 0;
    MPI_Pack_size(count, dt, MPI_COMM_SELF, &psize);
    std::vector<unsigned char> ref(psize + 1), mine(l.bytes + 1), dense(l.bytes + 1);
    MPI_Pack(base, count, dt, ref.data(), psize, &pos, MPI_COMM_SELF);
    bool ok = (size_t)pos == l.bytes;
    ncclmpi::layout_pack_host(l, base, mine.data());
    ok = ok && memcmp(ref.data(), mine.data(), l.bytes) == 0;
    bool ov = overlapping(l);
    if (ok) {  // unpack random bytes into two identically poisoned buffers
        for (auto &c : dense) c = (unsigned char)rng();
        for (size_t i = 0; i < span; i++) u1[i] = u2[i] = (unsigned char)(i * 131 + 7);
        pos = 0;
        MPI_Unpack(dense.data(), (int)l.bytes, &pos, (char *)u1.data() + margin - lo, count, dt, MPI_COMM_SELF);
        ncclmpi::layout_unpack_host(l, dense.data(), (char *)u2.data() + margin - lo);
        ok = (size_t)pos == l.bytes && u1 == u2;
    }
    n_overlap += ov;
    n_multi_run += l.runs.size() > 1;
    for (const LayoutRun &r : l.runs) n_odd_stride += r.count > 1 && r.stride < (MPI_Aint)r.len;
    if (!ok) {
        fprintf(stderr, "MISMATCH (%s): %s count %d: %zu bytes (MPI %d), %zu runs%s\n",
                pos == (int)l.bytes ? "data" : "size", desc.c_str(), count, l.bytes, pos, l.runs.size(),
                ov ? ", overlapping" : "");
        for (size_t i = 0; i < l.runs.size() && i < 8; i++)
            fprintf(stderr, "  run off %lld len %zu count %zu stride %lld\n", (long long)l.runs[i].off, l.runs[i].len,
                    l.runs[i].count, (long long)l.runs[i].stride);
        failures++;
    }
    if (lout) *lout = l;
    return ok;
}

static void test_random(unsigned long long seed, int ntypes)
{
    rng.seed(seed);
    for (int i = 0; i < ntypes; i++) {
        Gen g = gen(rnd(1, 3));
        MPI_Type_commit(&g.t);
        compare(g.t, rnd(0, 5), g.desc, nullptr, g.suspect);
        release(&g.t);
    }
}

// ---- fixed shapes ----------------------------------------------------------------------------

// Compare count elements of t (committed and freed here) against MPI; check the number of runs
// when want >= 0.
static void expect_runs(MPI_Datatype t, int count, const char *desc, long want = -1)
{
    Layout l;
    MPI_Type_commit(&t);
    compare(t, count, desc, &l);
    MPI_Type_free(&t);
    if (want >= 0 && l.runs.size() != (size_t)want) {
        fprintf(stderr, "%s x%d: %zu runs, expected %ld\n", desc, count, l.runs.size(), want);
        failures++;
    }
}

static void test_fixed(void)
{
    MPI_Datatype t, u;
    // matrix column: N doubles LD apart
    MPI_Type_vector(100, 1, 128, MPI_DOUBLE, &t);
    expect_runs(t, 1, "column vector(100,1,128,double)", 1);
    // transposed columns: vector(4,1,n) resized to one float, count n: one run per column
    MPI_Type_vector(4, 1, 9, MPI_FLOAT, &u);
    MPI_Type_create_resized(u, 0, sizeof(float), &t);
    MPI_Type_free(&u);
    expect_runs(t, 9, "resized(0,4,vector(4,1,9,float)) x9", 9);
    // struct {int; double} with its padding, 5 of them: each double runs into the next int, so
    // int, then 4 x (double + int) 16 bytes apart, then the last double
    struct S { int i; double d; };
    int bl[2] = {1, 1};
    MPI_Aint da[2] = {offsetof(S, i), offsetof(S, d)};
    MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, bl, da, ts, &u);
    MPI_Type_create_resized(u, 0, sizeof(S), &t);
    MPI_Type_free(&u);
    expect_runs(t, 5, "struct{int;double} x5", 3);
    // a 3x2x2 block of a 6x5x4 array, both orders (C: one run of 2 rows per plane)
    int sz[3] = {6, 5, 4}, sub[3] = {3, 2, 2}, st[3] = {1, 2, 1};
    MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_C, MPI_DOUBLE, &t);
    expect_runs(t, 2, "subarray C 6x5x4", 2 * 3);
    MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_FORTRAN, MPI_DOUBLE, &t);
    expect_runs(t, 1, "subarray F 6x5x4");
    // hindexed with a negative lower bound
    int hbl[3] = {2, 1, 3};
    MPI_Aint hda[3] = {-24, 8, -64};
    MPI_Type_create_hindexed(3, hbl, hda, MPI_INT, &t);
    expect_runs(t, 3, "hindexed({2,1,3},{-24,8,-64},int) x3");
    // Open MPI 4.1 quirks (see Gen::suspect): refused, or else exactly what MPI_Pack does
    MPI_Type_vector(4, 1, -1, MPI_CHAR, &t);
    MPI_Type_commit(&t);
    compare(t, 2, "vector(4,1,-1,char) x2", nullptr, true);
    MPI_Type_free(&t);
    MPI_Type_indexed(0, hbl, hbl, MPI_FLOAT, &u);
    MPI_Aint sda[2] = {57, 2};
    MPI_Datatype sts[2] = {MPI_SHORT, u};
    MPI_Type_create_struct(2, bl, sda, sts, &t);
    MPI_Type_free(&u);
    MPI_Type_commit(&t);
    compare(t, 3, "struct(1@57:short,1@2:indexed({},{},float)) x3", nullptr, true);
    MPI_Type_free(&t);
    // darray: block x cyclic(2) over a 2x3 grid, rank 4
    int gs[2] = {7, 10}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {2, 3};
    MPI_Type_create_darray(6, 4, 2, gs, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
    expect_runs(t, 2, "darray 7x10 block,cyclic(2) rank 4 of 2x3");
}

static void test_compression(void)
{
    MPI_Datatype t, u;
    MPI_Type_contiguous(1000, MPI_INT, &t);
    expect_runs(t, 7, "contiguous(1000,int) x7", 1);
    MPI_Type_vector(1000, 1, 7, MPI_FLOAT, &t);
    expect_runs(t, 1, "vector(1000,1,7,float)", 1);
    // a vector resized to one period of its pattern, count 1000: one run of 2000 blocks
    MPI_Type_vector(2, 1, 7, MPI_FLOAT, &u);
    MPI_Type_create_resized(u, 0, 2 * 7 * sizeof(float), &t);
    MPI_Type_free(&u);
    expect_runs(t, 1000, "resized(0,56,vector(2,1,7,float)) x1000", 1);
    // one float resized to a row of 7: count 1000 is a column, one run
    MPI_Type_vector(1, 1, 7, MPI_FLOAT, &u);
    MPI_Type_create_resized(u, 0, 7 * sizeof(float), &t);
    MPI_Type_free(&u);
    expect_runs(t, 1000, "resized(0,28,vector(1,1,7,float)) x1000", 1);
    // blocks of 3 ints every 5 ints: one run; two of them: the second starts right after the
    // first one's last block (the extent ends there), so the two join in a block of 6 between
    MPI_Type_vector(50, 3, 5, MPI_INT, &t);
    expect_runs(t, 1, "vector(50,3,5,int)", 1);
    MPI_Type_vector(50, 3, 5, MPI_INT, &t);
    expect_runs(t, 2, "vector(50,3,5,int) x2", 3);
    int dis[50];
    for (int i = 0; i < 50; i++) dis[i] = 5 * i;
    MPI_Type_create_indexed_block(50, 3, dis, MPI_INT, &t);
    expect_runs(t, 1, "indexed_block(3,{0,5,..,245},int)", 1);
}

static void test_limits(void)
{
    Layout l;
    MPI_Datatype t, u;
    MPI_Type_vector(4, 1, 100, MPI_FLOAT, &u);
    MPI_Type_create_resized(u, 0, sizeof(float), &t);
    MPI_Type_free(&u);
    MPI_Type_commit(&t);
    CHECK(!ncclmpi::layout_build(t, 100, 10, &l) && l.runs.empty());  // 100 runs needed
    CHECK(ncclmpi::layout_build(t, 100, 100, &l) && l.runs.size() == 100 && l.bytes == 1600);
    CHECK(!ncclmpi::layout_build(t, -1, 100, &l));
    CHECK(ncclmpi::layout_build(t, 0, 100, &l) && l.runs.empty() && l.bytes == 0);
    MPI_Type_free(&t);
    CHECK(!ncclmpi::layout_build(MPI_DATATYPE_NULL, 1, 100, &l));
    // F90 parameterized types are not decoded (the caller packs with MPI)
    if (MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t) == MPI_SUCCESS) CHECK(!ncclmpi::layout_build(t, 1, 100, &l));
    // a long count of a compressible type: built in constant time
    MPI_Type_vector(1, 1, 3, MPI_DOUBLE, &u);
    MPI_Type_create_resized(u, 0, 3 * sizeof(double), &t);
    MPI_Type_free(&u);
    MPI_Type_commit(&t);
    CHECK(ncclmpi::layout_build(t, 1LL << 40, 4, &l) && l.runs.size() == 1 && l.runs[0].count == (size_t(1) << 40));
    MPI_Type_free(&t);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    unsigned long long seed = argc > 1 ? strtoull(argv[1], nullptr, 0) : 20240611;
    int ntypes = argc > 2 ? atoi(argv[2]) : 600;
    test_fixed();
    test_compression();
    test_limits();
    test_random(seed, ntypes);
    printf("test_layout: %d datatype/count pairs tested against MPI_Pack/MPI_Unpack (seed %llu: %d random), "
           "%d with several runs, %d overlapping, %d runs with a negative or short stride; "
           "%d constructions refused by MPI; %d Open MPI quirks left to PMPI_Pack\n",
           n_tested, seed, ntypes, n_multi_run, n_overlap, n_odd_stride, n_rejected, n_refused);
    MPI_Finalize();
    if (failures) {
        fprintf(stderr, "test_layout: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_layout: all checks passed\n");
    return 0;
}
