// ncclmpi: datatype facts (size, bounds, contiguity), decoded with the MPI envelope API.
#include "core/dtype/dtype.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tl/oneshot/oneshot.h"
#include "route/route.h"

namespace ncclmpi {

static std::mutex mu;
static std::unordered_map<MPI_Datatype, DtypeInfo> predefined_cache;
static int keyval = MPI_KEYVAL_INVALID;

static uint64_t dtype_gen = 1;
// initial-exec: the library is preloaded or linked, so its TLS is static and a lookup is one
// load (the general model calls __tls_get_addr on every access)
static thread_local struct {
    MPI_Datatype dt;
    const DtypeInfo *info;
    uint64_t gen;
} dcache[4] __attribute__((tls_model("initial-exec")));
static thread_local unsigned dcache_next __attribute__((tls_model("initial-exec")));

static int free_info(MPI_Datatype, int, void *val, void *)
{
    __atomic_add_fetch(&dtype_gen, 1, __ATOMIC_RELEASE);
    delete static_cast<DtypeInfo *>(val);
    return MPI_SUCCESS;
}

// One element of `dt` is an in-order contiguous byte run (gaps allowed only at the ends via
// resizing, which the caller checks through extent == size).
static bool dense(MPI_Datatype dt, int depth = 0)
{
    int ni, na, nd, comb;
    if (depth > 32 || PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS) return false;
    // predefined types, and the F90 parameterized ones (a predefined type of another precision)
    if (comb == MPI_COMBINER_NAMED || comb == MPI_COMBINER_F90_REAL || comb == MPI_COMBINER_F90_COMPLEX ||
        comb == MPI_COMBINER_F90_INTEGER)
        return true;
    std::vector<int> ints(ni + 1);
    std::vector<MPI_Aint> aints(na + 1);
    std::vector<MPI_Datatype> types(nd + 1);
    if (PMPI_Type_get_contents(dt, ni, na, nd, ints.data(), aints.data(), types.data()) != MPI_SUCCESS) return false;
    bool ok = false;
    auto child_ok = [&](MPI_Datatype t, MPI_Aint *ext, int *sz) {
        MPI_Aint lb;
        PMPI_Type_get_extent(t, &lb, ext);
        PMPI_Type_size(t, sz);
        return dense(t, depth + 1) && *ext == *sz && lb == 0;
    };
    MPI_Aint ext = 0;
    int sz = 0;
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:
        ok = dense(types[0], depth + 1);
        break;
    case MPI_COMBINER_CONTIGUOUS:
        ok = ints[0] <= 1 ? dense(types[0], depth + 1) : child_ok(types[0], &ext, &sz);
        break;
    case MPI_COMBINER_VECTOR:  // count, blocklength, stride (in elements)
        ok = child_ok(types[0], &ext, &sz) && (ints[0] <= 1 || ints[1] == ints[2]);
        break;
    case MPI_COMBINER_HVECTOR:  // count, blocklength; stride in bytes
        ok = child_ok(types[0], &ext, &sz) && (ints[0] <= 1 || aints[0] == (MPI_Aint)ints[1] * ext);
        break;
    case MPI_COMBINER_INDEXED:  // count, blocklens[count], displs[count] (elements)
    case MPI_COMBINER_HINDEXED: // count, blocklens[count]; aints: displs (bytes)
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK: {
        if (!child_ok(types[0], &ext, &sz)) break;
        int n = ints[0];
        bool block = comb == MPI_COMBINER_INDEXED_BLOCK || comb == MPI_COMBINER_HINDEXED_BLOCK;
        bool bytes = comb == MPI_COMBINER_HINDEXED || comb == MPI_COMBINER_HINDEXED_BLOCK;
        MPI_Aint next = 0;
        bool first = true;
        ok = true;
        for (int i = 0; i < n && ok; i++) {
            long long len = block ? ints[1] : ints[1 + i];
            MPI_Aint d = bytes ? aints[i] : (MPI_Aint)(block ? ints[2 + i] : ints[1 + n + i]) * ext;
            if (len == 0) continue;
            if (!first && d != next) ok = false;
            next = d + (MPI_Aint)len * ext;
            first = false;
        }
        break;
    }
    case MPI_COMBINER_STRUCT: {  // count, blocklens[count]; aints: displs; types[count]
        int n = ints[0];
        MPI_Aint next = 0;
        bool first = true;
        ok = true;
        for (int i = 0; i < n && ok; i++) {
            if (ints[1 + i] == 0) continue;
            if (!child_ok(types[i], &ext, &sz)) { ok = false; break; }
            if (!first && aints[i] != next) ok = false;
            next = aints[i] + (MPI_Aint)ints[1 + i] * ext;
            first = false;
        }
        break;
    }
    default:  // subarray, darray, f90 parameterized types: treat as non-contiguous
        ok = false;
    }
    for (int i = 0; i < nd; i++) {
        int ci, ca, cd, cc;
        PMPI_Type_get_envelope(types[i], &ci, &ca, &cd, &cc);
        if (cc != MPI_COMBINER_NAMED) PMPI_Type_free(&types[i]);
    }
    return ok;
}

// The predefined type every basic element of `dt` has (its type signature is n copies of it), or
// MPI_DATATYPE_NULL when the signature mixes types. Shared by every rank whose type has the
// same signature, so the route may depend on it.
static MPI_Datatype homogeneous_basic(MPI_Datatype dt, int depth = 0)
{
    int ni, na, nd, comb;
    if (depth > 32 || PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS) return MPI_DATATYPE_NULL;
    if (comb == MPI_COMBINER_NAMED) return dt;
    if (comb == MPI_COMBINER_F90_REAL || comb == MPI_COMBINER_F90_INTEGER || comb == MPI_COMBINER_F90_COMPLEX) {
        // the predefined type of the same kind and size: what another rank may pass instead
        int sz = 0;
        PMPI_Type_size(dt, &sz);
        if (comb == MPI_COMBINER_F90_REAL) return sz == 4 ? MPI_REAL4 : sz == 8 ? MPI_REAL8 : MPI_DATATYPE_NULL;
        if (comb == MPI_COMBINER_F90_INTEGER)
            return sz == 1 ? MPI_INTEGER1 : sz == 2 ? MPI_INTEGER2 : sz == 4 ? MPI_INTEGER4 : sz == 8 ? MPI_INTEGER8 : MPI_DATATYPE_NULL;
        return sz == 8 ? MPI_COMPLEX8 : sz == 16 ? MPI_COMPLEX16 : MPI_DATATYPE_NULL;
    }
    std::vector<int> ints(ni + 1);
    std::vector<MPI_Aint> aints(na + 1);
    std::vector<MPI_Datatype> types(nd + 1);
    if (PMPI_Type_get_contents(dt, ni, na, nd, ints.data(), aints.data(), types.data()) != MPI_SUCCESS)
        return MPI_DATATYPE_NULL;
    MPI_Datatype basic = MPI_DATATYPE_NULL;
    bool mixed = false;
    for (int i = 0; i < nd; i++) {
        // struct members with blocklength 0 do not appear in the signature
        if (comb == MPI_COMBINER_STRUCT && ints[1 + i] == 0) continue;
        MPI_Datatype b = homogeneous_basic(types[i], depth + 1);
        if (b == MPI_DATATYPE_NULL || (basic != MPI_DATATYPE_NULL && b != basic)) mixed = true;
        else basic = b;
    }
    for (int i = 0; i < nd; i++) {
        int ci, ca, cd, cc;
        PMPI_Type_get_envelope(types[i], &ci, &ca, &cd, &cc);
        if (cc != MPI_COMBINER_NAMED) PMPI_Type_free(&types[i]);
    }
    return mixed ? MPI_DATATYPE_NULL : basic;
}

static bool compute(MPI_Datatype dt, DtypeInfo *d)
{
    int sz = 0;
    MPI_Count sz_x = 0;
    if (PMPI_Type_size_x(dt, &sz_x) != MPI_SUCCESS) return false;
    (void)sz;
    d->size = (size_t)sz_x;
    PMPI_Type_get_extent(dt, &d->lb, &d->extent);
    PMPI_Type_get_true_extent(dt, &d->true_lb, &d->true_extent);
    d->basic = homogeneous_basic(dt);
    d->basic_size = 0;
    if (d->basic != MPI_DATATYPE_NULL) {
        int bs = 0;
        PMPI_Type_size(d->basic, &bs);
        d->basic_size = (size_t)bs;
    }
    d->nccl_type = d->basic != MPI_DATATYPE_NULL ? nm_map_dtype(d->basic) : NM_UNSUPPORTED;
    d->contig = (MPI_Aint)d->size == d->extent && d->extent == d->true_extent && d->lb == d->true_lb && dense(dt);
    oneshot_kind(d->basic, &d->os_kind, &d->os_ops);
    return true;
}

const DtypeInfo *dtype_info(MPI_Datatype dt)
{
    if (dt == MPI_DATATYPE_NULL) return nullptr;
    uint64_t gen = __atomic_load_n(&dtype_gen, __ATOMIC_ACQUIRE);
    for (auto &e : dcache)
        if (e.dt == dt && e.gen == gen && e.info) return e.info;
    const DtypeInfo *d = dtype_info_lookup(dt);
    if (d) dcache[dcache_next++ & 3] = {dt, d, gen};
    return d;
}

const DtypeInfo *dtype_info_lookup(MPI_Datatype dt)
{
    int ni, na, nd, comb;
    if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS) return nullptr;
    std::lock_guard<std::mutex> g(mu);
    if (comb == MPI_COMBINER_NAMED) {
        auto it = predefined_cache.find(dt);
        if (it != predefined_cache.end()) return &it->second;
        DtypeInfo d;
        if (!compute(dt, &d)) return nullptr;
        return &predefined_cache.emplace(dt, d).first->second;
    }
    if (keyval == MPI_KEYVAL_INVALID)
        PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, free_info, &keyval, nullptr);
    void *val = nullptr;
    int found = 0;
    PMPI_Type_get_attr(dt, keyval, &val, &found);
    if (found) return static_cast<DtypeInfo *>(val);
    DtypeInfo *d = new DtypeInfo;
    if (!compute(dt, d)) { delete d; return nullptr; }
    PMPI_Type_set_attr(dt, keyval, d);
    return d;
}

void dtype_span(const DtypeInfo *d, MPI_Aint disp, long long count, MPI_Aint *lo, MPI_Aint *hi)
{
    if (count <= 0 || d->size == 0) { *lo = *hi = disp; return; }
    MPI_Aint a = disp + d->true_lb;
    MPI_Aint b = disp + (MPI_Aint)(count - 1) * d->extent + d->true_lb;  // start of last element
    if (b < a) { MPI_Aint t = a; a = b; b = t; }  // negative extent
    *lo = a;
    *hi = b + d->true_extent;
}

}  // namespace ncclmpi
