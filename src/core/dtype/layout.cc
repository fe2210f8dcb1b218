// ncclmpi: datatype layouts as strided runs (decoded with the MPI envelope API), and one run
// walker with two copy back-ends: memcpy on the host, the CUDA driver's async copies on the GPU.
#include "core/dtype/layout.h"

#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <memory>

#include "core/cuda/cuda_api.h"
#include "util/log.h"

namespace ncclmpi {
namespace {

constexpr int kMaxDepth = 32;
// Run-list appends one build may make before giving up (the caller falls back to PMPI_Pack),
// besides one per entry of the type's description: repetitions that do not compress stop early.
constexpr size_t kMinWork = size_t(1) << 20;

using Runs = std::vector<LayoutRun>;

// A run of equal blocks back to back is one block; a single block has stride 0.
void normalize(LayoutRun &r)
{
    if (r.count > 1 && r.stride == (MPI_Aint)r.len) {
        r.len *= r.count;
        r.count = 1;
    }
    if (r.count == 1) r.stride = 0;
}

// Per nesting level: get_contents' arrays and the run lists being built, reused across siblings
// so a build allocates O(depth) vectors at most.
struct Level {
    std::vector<int> ints;
    std::vector<MPI_Aint> aints;
    std::vector<MPI_Datatype> types;
    Runs runs, a, b;  // runs: this level's result; a, b: scratch
};

class Builder {
public:
    explicit Builder(size_t max_runs)
        : cap_(max_runs < SIZE_MAX / 32 ? 2 * max_runs + 16 : SIZE_MAX),
          work_left_(max_runs < SIZE_MAX / 32 ? (max_runs * 16 > kMinWork ? max_runs * 16 : kMinWork) : SIZE_MAX)
    {
    }
    bool decode(MPI_Datatype dt, int depth);
    Runs &result() { return lv_[0].runs; }
    bool repeat(Runs &dst, const Runs &src, size_t n, MPI_Aint step, MPI_Aint shift, size_t cap);

private:
    bool push(Runs &dst, LayoutRun r, size_t cap);
    bool child(MPI_Datatype t, int depth, MPI_Aint *ext);
    bool named(MPI_Datatype dt, Runs &out);
    bool vector(int comb, Level &l, int depth);
    bool indexed(int comb, Level &l, int depth);
    bool structure(Level &l, int depth);
    bool subarray(Level &l, int depth);
    bool darray(Level &l, int depth);
    Runs &dims_out(Level &l, const Runs *src) { return src == &l.a ? l.b : l.a; }
    void finish(Level &l, Runs *src)
    {
        if (src != &l.runs) l.runs.swap(*src);
    }

    Level lv_[kMaxDepth + 2];
    size_t cap_;
    size_t work_left_;
};

// Merge r into l when r's blocks continue l's (equal lengths at l's stride); r is normalized.
bool merge(LayoutRun &l, const LayoutRun &r)
{
    if (l.len != r.len) return false;
    if (l.count == 1) {
        MPI_Aint s = r.off - l.off;
        if (r.count > 1 && r.stride != s) return false;
        l.stride = s;
    } else if (r.off != l.off + (MPI_Aint)l.count * l.stride || (r.count > 1 && r.stride != l.stride)) {
        return false;
    }
    l.count += r.count;
    return true;
}

bool same(const LayoutRun &a, const LayoutRun &b)
{
    return a.off == b.off && a.len == b.len && a.count == b.count && a.stride == b.stride;
}

// Append one run in pack order. Contiguous bytes come first: a block that continues the last
// block of the list is joined to it (split off its run if need be); then equal blocks at a
// constant stride join the last run.
bool Builder::push(Runs &dst, LayoutRun r, size_t cap)
{
    if (r.len == 0 || r.count == 0) return true;
    if (work_left_ == 0) return false;
    work_left_--;
    normalize(r);
    if (!dst.empty()) {
        LayoutRun &l = dst.back();
        MPI_Aint tail = l.off + (MPI_Aint)(l.count - 1) * l.stride;  // l's last block
        if (tail + (MPI_Aint)l.len == r.off) {
            LayoutRun joined = {tail, l.len + r.len, 1, 0};
            if (l.count == 1)
                dst.pop_back();
            else if (--l.count == 1)
                l.stride = 0;
            if (!push(dst, joined, cap)) return false;
            return r.count == 1 || push(dst, {r.off + r.stride, r.len, r.count - 1, r.stride}, cap);
        }
        if (merge(l, r)) return true;
    }
    if (dst.size() >= cap) return false;
    dst.push_back(r);
    return true;
}

// Append n copies of src, copy i shifted by shift + i*step.
bool Builder::repeat(Runs &dst, const Runs &src, size_t n, MPI_Aint step, MPI_Aint shift, size_t cap)
{
    if (n == 0 || src.empty()) return true;
    if (src.size() == 1) {  // one run: the repetition is usually one run too
        LayoutRun r = src[0];
        r.off += shift;
        if (r.count == 1 || n == 1) {
            if (n > 1) r.count = n, r.stride = step;
            return push(dst, r, cap);
        }
        if (step == (MPI_Aint)r.count * r.stride) {
            r.count *= n;
            return push(dst, r, cap);
        }
    }
    const LayoutRun none = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        size_t before = dst.size();
        LayoutRun last = before ? dst[before - 1] : none, prev = before > 1 ? dst[before - 2] : none;
        for (const LayoutRun &s : src) {
            LayoutRun r = s;
            r.off += shift + (MPI_Aint)i * step;
            if (!push(dst, r, cap)) return false;
        }
        // Copy i vanished into the last run, the rest of the list untouched: copy i+1 is copy i
        // moved by step, so when step is what copy i added to that run's span, every later copy
        // vanishes the same way.
        if (i + 1 == n || before == 0 || dst.size() != before) continue;
        LayoutRun &l = dst.back();
        if (l.off != last.off || (before > 1 && !same(dst[before - 2], prev))) continue;
        size_t rest = n - 1 - i;
        if (l.count == 1 && last.count == 1 && l.len > last.len && (MPI_Aint)(l.len - last.len) == step) {
            l.len += rest * (l.len - last.len);
            return true;
        }
        if (l.count > last.count && l.len == last.len && (last.count == 1 || l.stride == last.stride) &&
            step == (MPI_Aint)(l.count - last.count) * l.stride) {
            l.count += rest * (l.count - last.count);
            return true;
        }
    }
    return true;
}

// Decode child type t into lv_[depth].runs; *ext = its extent (the repeat stride).
bool Builder::child(MPI_Datatype t, int depth, MPI_Aint *ext)
{
    MPI_Aint lb;
    if (PMPI_Type_get_extent(t, &lb, ext) != MPI_SUCCESS) return false;
    return decode(t, depth);
}

bool Builder::named(MPI_Datatype dt, Runs &out)
{
    MPI_Count size;
    MPI_Aint tlb, text;
    if (PMPI_Type_size_x(dt, &size) != MPI_SUCCESS || PMPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS)
        return false;
    if (dt == MPI_SHORT_INT) {  // the one predefined pair type with a hole
        struct si { short s; int i; };
        return push(out, {0, sizeof(short), 1, 0}, cap_) && push(out, {offsetof(si, i), sizeof(int), 1, 0}, cap_);
    }
    if (size < 0 || (MPI_Aint)size != text) return false;
    return push(out, {tlb, (size_t)size, 1, 0}, cap_);
}

// VECTOR: count, blocklength, stride (elements); HVECTOR: count, blocklength; stride in bytes.
bool Builder::vector(int comb, Level &l, int depth)
{
    int n = l.ints[0], bl = l.ints[1];
    if (n < 0 || bl < 0) return false;
    if (n == 0 || bl == 0) return true;
    MPI_Aint ext;
    if (!child(l.types[0], depth + 1, &ext)) return false;
    MPI_Aint stride = comb == MPI_COMBINER_VECTOR ? (MPI_Aint)l.ints[2] * ext : l.aints[0];
    l.a.clear();
    return repeat(l.a, lv_[depth + 1].runs, bl, ext, 0, cap_) && repeat(l.runs, l.a, n, stride, 0, cap_);
}

// INDEXED: count, blocklens[count], displs[count] (elements); HINDEXED: count, blocklens[count];
// aints: displs. INDEXED_BLOCK: count, blocklen, displs[count]; HINDEXED_BLOCK: count, blocklen;
// aints: displs.
bool Builder::indexed(int comb, Level &l, int depth)
{
    int n = l.ints[0];
    bool block = comb == MPI_COMBINER_INDEXED_BLOCK || comb == MPI_COMBINER_HINDEXED_BLOCK;
    bool bytes = comb == MPI_COMBINER_HINDEXED || comb == MPI_COMBINER_HINDEXED_BLOCK;
    long long total = 0;
    for (int i = 0; i < n; i++) {
        int len = block ? l.ints[1] : l.ints[1 + i];
        if (len < 0) return false;
        total += len;
    }
    if (n <= 0 || total == 0) return n >= 0;
    MPI_Aint ext;
    if (!child(l.types[0], depth + 1, &ext)) return false;
    const Runs &c = lv_[depth + 1].runs;
    int prev = -1;
    for (int i = 0; i < n; i++) {
        int len = block ? l.ints[1] : l.ints[1 + i];
        if (len == 0) continue;
        MPI_Aint d = bytes ? l.aints[i] : (MPI_Aint)(block ? l.ints[2 + i] : l.ints[1 + n + i]) * ext;
        if (len != prev) {  // one block of the type, reused while the blocklength repeats
            l.a.clear();
            if (!repeat(l.a, c, len, ext, 0, cap_)) return false;
            prev = len;
        }
        if (!repeat(l.runs, l.a, 1, 0, d, cap_)) return false;
    }
    return true;
}

// STRUCT: count, blocklens[count]; aints: displs[count]; types[count]. A member of size 0 moves
// the bounds Open MPI reports (4.1: the extent) but not the stride its pack uses for count > 1:
// such types are left to PMPI_Pack.
bool Builder::structure(Level &l, int depth)
{
    int n = l.ints[0];
    for (int i = 0; i < n; i++) {
        int len = l.ints[1 + i];
        MPI_Count size;
        if (len < 0 || PMPI_Type_size_x(l.types[i], &size) != MPI_SUCCESS || (len > 0 && size == 0)) return false;
        if (len == 0) continue;
        MPI_Aint ext;
        if (!child(l.types[i], depth + 1, &ext)) return false;
        if (!repeat(l.runs, lv_[depth + 1].runs, len, ext, l.aints[i], cap_)) return false;
    }
    return n >= 0;
}

// SUBARRAY: ndims, sizes[ndims], subsizes[ndims], starts[ndims], order. Element (i_0..i_{n-1})
// sits at its index in the full array; the fastest dimension is the last (C) or first (Fortran).
bool Builder::subarray(Level &l, int depth)
{
    int nd = l.ints[0];
    const int *sizes = &l.ints[1], *sub = &l.ints[1 + nd], *starts = &l.ints[1 + 2 * nd];
    bool c_order = l.ints[1 + 3 * nd] == MPI_ORDER_C;
    for (int k = 0; k < nd; k++)
        if (sub[k] <= 0) return sub[k] == 0;
    MPI_Aint stride;
    if (nd <= 0 || !child(l.types[0], depth + 1, &stride)) return false;
    Runs *src = &lv_[depth + 1].runs;
    for (int k = 0; k < nd; k++) {
        int d = c_order ? nd - 1 - k : k;
        Runs &dst = dims_out(l, src);
        dst.clear();
        if (!repeat(dst, *src, sub[d], stride, (MPI_Aint)starts[d] * stride, cap_)) return false;
        src = &dst;
        stride *= sizes[d];
    }
    finish(l, src);
    return true;
}

// DARRAY: size, rank, ndims, gsizes[ndims], distribs[ndims], dargs[ndims], psizes[ndims], order.
// The process grid is row-major whatever the order; in each dimension the process holds its
// indices in increasing order: one block (BLOCK), every psize-th block of darg (CYCLIC), or all
// (NONE).
bool Builder::darray(Level &l, int depth)
{
    int rank = l.ints[1], nd = l.ints[2];
    const int *gs = &l.ints[3], *dist = &l.ints[3 + nd], *darg = &l.ints[3 + 2 * nd], *ps = &l.ints[3 + 3 * nd];
    bool c_order = l.ints[3 + 4 * nd] == MPI_ORDER_C;
    MPI_Aint stride;
    if (nd <= 0 || !child(l.types[0], depth + 1, &stride)) return false;
    Runs *src = &lv_[depth + 1].runs;
    for (int k = 0; k < nd; k++) {
        int d = c_order ? nd - 1 - k : k;
        long long g = gs[d], p = ps[d], coord = rank;
        for (int j = nd - 1; j > d; j--) coord /= ps[j];
        coord %= p;
        Runs &dst = dims_out(l, src);
        dst.clear();
        long long lo = 0, len = g;  // MPI_DISTRIBUTE_NONE
        if (dist[d] == MPI_DISTRIBUTE_BLOCK) {
            long long b = darg[d] == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : darg[d];
            lo = coord * b;
            len = lo >= g ? 0 : (g - lo < b ? g - lo : b);
        } else if (dist[d] == MPI_DISTRIBUTE_CYCLIC) {
            long long b = darg[d] == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg[d];
            long long first = coord * b, full = first + b > g ? 0 : (g - first - b) / (p * b) + 1;
            Runs &blk = l.runs;  // free until finish(): src and dst are l.a / l.b or the child's
            blk.clear();
            if (!repeat(blk, *src, b, stride, 0, cap_) || !repeat(dst, blk, full, p * b * stride, first * stride, cap_))
                return false;
            lo = first + full * p * b;  // the partial block at the end, if this process has one
            len = lo < g ? g - lo : 0;
        } else if (dist[d] != MPI_DISTRIBUTE_NONE) {
            return false;
        }
        if (len > 0 && !repeat(dst, *src, len, stride, lo * stride, cap_)) return false;
        src = &dst;
        stride *= g;
    }
    finish(l, src);
    return true;
}

void free_types(std::vector<MPI_Datatype> &types, int n)
{
    for (int i = 0; i < n; i++) {
        int ni, na, nd, comb;
        if (PMPI_Type_get_envelope(types[i], &ni, &na, &nd, &comb) == MPI_SUCCESS && comb != MPI_COMBINER_NAMED)
            PMPI_Type_free(&types[i]);
    }
}

// The runs of one element span exactly the true extent the MPI reports. Checked at every level
// of the decode, so a type the MPI builds differently from the standard is left to PMPI_Pack:
// Open MPI 4.1 reads a byte stride of -1 (hvector, or vector of a 1-byte type) as "the child's
// extent", so vector(n, 1, -1, MPI_CHAR) packs n bytes going up.
bool bounds_match(MPI_Datatype dt, const Runs &runs)
{
    MPI_Aint tlb, text;
    if (PMPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS) return false;
    MPI_Aint lo = runs[0].off, hi = lo;
    for (const LayoutRun &r : runs) {
        MPI_Aint last = r.off + (MPI_Aint)(r.count - 1) * r.stride;
        lo = std::min(lo, std::min(r.off, last));
        hi = std::max(hi, std::max(r.off, last) + (MPI_Aint)r.len);
    }
    return lo == tlb && hi - lo == text;
}

// The typemap of one element of dt (origin at the buffer pointer) into lv_[depth].runs.
bool Builder::decode(MPI_Datatype dt, int depth)
{
    if (depth > kMaxDepth) return false;
    Level &l = lv_[depth];
    l.runs.clear();
    int ni, na, nd, comb;
    if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS) return false;
    if (comb == MPI_COMBINER_NAMED) return named(dt, l.runs);
    if (work_left_ < SIZE_MAX / 2) work_left_ += (size_t)ni + na + nd;  // as much as the description
    l.ints.resize(ni + 1);
    l.aints.resize(na + 1);
    l.types.resize(nd + 1);
    if (PMPI_Type_get_contents(dt, ni, na, nd, l.ints.data(), l.aints.data(), l.types.data()) != MPI_SUCCESS)
        return false;
    bool ok = false;
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED:  // the data stays where the child has it; only the extent changes
        ok = decode(l.types[0], depth + 1);
        if (ok) l.runs.swap(lv_[depth + 1].runs);
        break;
    case MPI_COMBINER_CONTIGUOUS: {
        int n = l.ints[0];
        MPI_Aint ext;
        ok = n == 0 ||
             (n > 0 && child(l.types[0], depth + 1, &ext) && repeat(l.runs, lv_[depth + 1].runs, n, ext, 0, cap_));
        break;
    }
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR: ok = vector(comb, l, depth); break;
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED:
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK: ok = indexed(comb, l, depth); break;
    case MPI_COMBINER_STRUCT: ok = structure(l, depth); break;
    case MPI_COMBINER_SUBARRAY: ok = subarray(l, depth); break;
    case MPI_COMBINER_DARRAY: ok = darray(l, depth); break;
    default: ok = false;  // F90 parameterized types and anything newer: the caller uses PMPI_Pack
    }
    free_types(l.types, nd);
    return ok && (l.runs.empty() || bounds_match(dt, l.runs));
}

// ---- the copies: one walker, two back-ends ------------------------------------------------

// CU_DEVICE_ATTRIBUTE_MAX_PITCH on every NVIDIA GPU so far; wider strides go block by block.
constexpr MPI_Aint kMaxPitch = 2147483647;

// Calls be.one(off, pos, len) and be.rows(off, pos, len, count, stride) for each run in pack
// order: off = offset in the typed buffer, pos = offset in the dense buffer.
template <class Backend>
nm_status_t walk(const Layout &l, Backend &be)
{
    size_t pos = 0;
    for (const LayoutRun &r : l.runs) {
        nm_status_t st = NM_OK;
        if (r.count == 1) {
            st = be.one(r.off, pos, r.len);
        } else if (r.stride >= (MPI_Aint)r.len && r.stride <= Backend::max_pitch) {
            st = be.rows(r.off, pos, r.len, r.count, r.stride);
        } else {
            for (size_t i = 0; i < r.count && st == NM_OK; i++)
                st = be.one(r.off + (MPI_Aint)i * r.stride, pos + i * r.len, r.len);
        }
        if (st != NM_OK) return st;
        pos += r.len * r.count;
    }
    return NM_OK;
}

struct HostCopy {
    static constexpr MPI_Aint max_pitch = PTRDIFF_MAX;
    char *typed, *dense;
    bool pack;
    nm_status_t one(MPI_Aint off, size_t pos, size_t len)
    {
        if (pack)
            memcpy(dense + pos, typed + off, len);
        else
            memcpy(typed + off, dense + pos, len);
        return NM_OK;
    }
    nm_status_t rows(MPI_Aint off, size_t pos, size_t len, size_t count, MPI_Aint stride)
    {
        for (size_t i = 0; i < count; i++) one(off + (MPI_Aint)i * stride, pos + i * len, len);
        return NM_OK;
    }
};

struct DevCopy {
    static constexpr MPI_Aint max_pitch = kMaxPitch;
    CUdeviceptr typed, dense;
    CUstream s;
    bool pack;
    nm_status_t one(MPI_Aint off, size_t pos, size_t len)
    {
        CUdeviceptr t = typed + (CUdeviceptr)off, d = dense + pos;
        NM_CU_CHECK(cu.cuMemcpyAsync(pack ? d : t, pack ? t : d, len, s), return NM_ERR_CUDA);
        return NM_OK;
    }
    nm_status_t rows(MPI_Aint off, size_t pos, size_t len, size_t count, MPI_Aint stride)
    {
        CUDA_MEMCPY2D m;
        memset(&m, 0, sizeof m);
        CUdeviceptr t = typed + (CUdeviceptr)off, d = dense + pos;
        m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
        m.srcDevice = pack ? t : d;
        m.srcPitch = pack ? (size_t)stride : len;
        m.dstDevice = pack ? d : t;
        m.dstPitch = pack ? len : (size_t)stride;
        m.WidthInBytes = len;
        m.Height = count;
        NM_CU_CHECK(cu.cuMemcpy2DAsync(&m, s), return NM_ERR_CUDA);
        return NM_OK;
    }
};

}  // namespace

bool layout_build(MPI_Datatype dt, long long count, size_t max_runs, Layout *out)
{
    out->runs.clear();
    out->bytes = 0;
    MPI_Count size;
    MPI_Aint lb, ext;
    if (count < 0 || dt == MPI_DATATYPE_NULL || PMPI_Type_size_x(dt, &size) != MPI_SUCCESS || size < 0 ||
        PMPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS)
        return false;
    if (count == 0 || size == 0) return true;
    std::unique_ptr<Builder> b(new Builder(max_runs));  // ~5 KiB of empty vectors: off the stack
    bool ok = b->decode(dt, 0) && b->repeat(out->runs, b->result(), (size_t)count, ext, 0, max_runs);
    size_t total = 0;
    for (const LayoutRun &r : out->runs) total += r.len * r.count;
    if (!ok || total != (size_t)size * (size_t)count) {  // the payload must add up
        if (ok) NM_DEBUG(STAGE, "layout of a datatype: %zu bytes found, %lld expected", total, (long long)size * count);
        out->runs.clear();
        return false;
    }
    out->bytes = total;
    return true;
}

void layout_pack_host(const Layout &l, const void *base, void *dense)
{
    HostCopy be{(char *)base, (char *)dense, true};
    walk(l, be);
}

void layout_unpack_host(const Layout &l, const void *dense, void *base)
{
    HostCopy be{(char *)base, (char *)dense, false};
    walk(l, be);
}

nm_status_t layout_pack_dev(const Layout &l, CUdeviceptr base, CUdeviceptr dense, CUstream s)
{
    DevCopy be{base, dense, s, true};
    return walk(l, be);
}

nm_status_t layout_unpack_dev(const Layout &l, CUdeviceptr dense, CUdeviceptr base, CUstream s)
{
    DevCopy be{base, dense, s, false};
    return walk(l, be);
}

}  // namespace ncclmpi
