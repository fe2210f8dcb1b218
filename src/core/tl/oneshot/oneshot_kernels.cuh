// ncclmpi: one-shot kernels for small device collectives (the window and the protocol are
// described in oneshot_abi.h). Part of the library's fatbin (core/cuda/fatbin.cu), which nvcc
// builds, the library embeds and core/cuda/kernels.cc loads with the driver API; no CUDA runtime
// call is made here.
#include <stdint.h>

#include "oneshot_abi.h"

namespace {

__device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long *flag_at(char *win, const nm_os_args_t &a, int p, int q, int b)
{
    return (unsigned long long *)(win + a.flags_off + ((size_t)(p * a.n + q) * NM_OS_MAX_BLOCKS + b) * 8);
}

// dst and src: global memory (dst may be a peer's, over NVLink)
__device__ __forceinline__ void copy_bytes(char *dst, const char *src, size_t len)
{
    if ((((uintptr_t)dst | (uintptr_t)src | len) & 15) == 0) {
        for (size_t i = threadIdx.x; i < len / 16; i += blockDim.x) ((int4 *)dst)[i] = ((const int4 *)src)[i];
    } else if ((((uintptr_t)dst | (uintptr_t)src | len) & 3) == 0) {
        for (size_t i = threadIdx.x; i < len / 4; i += blockDim.x) ((int *)dst)[i] = ((const int *)src)[i];
    } else {
        for (size_t i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
    }
}

// ---- element policies: load, store, combine(op, accumulated, next rank's) ----------------------
template <typename T> struct Wide { typedef unsigned int type; };  // wrapping integer arithmetic
template <> struct Wide<int64_t> { typedef unsigned long long type; };
template <> struct Wide<uint64_t> { typedef unsigned long long type; };

template <typename T> struct Int {
    typedef T V;
    static __device__ V load(const char *p, size_t i, int) { return ((const T *)p)[i]; }
    static __device__ void store(char *p, size_t i, int, V v) { ((T *)p)[i] = v; }
    static __device__ V comb(int op, V a, V b)
    {
        typedef typename Wide<T>::type W;
        switch (op) {
        case NM_OS_SUM: return (T)((W)a + (W)b);
        case NM_OS_PROD: return (T)((W)a * (W)b);
        case NM_OS_MIN: return b < a ? b : a;
        case NM_OS_MAX: return b > a ? b : a;
        case NM_OS_LAND: return (T)(a != 0 && b != 0);
        case NM_OS_LOR: return (T)(a != 0 || b != 0);
        case NM_OS_LXOR: return (T)((a != 0) != (b != 0));
        case NM_OS_BAND: return (T)(a & b);
        case NM_OS_BOR: return (T)(a | b);
        case NM_OS_BXOR: return (T)(a ^ b);
        default: return a;
        }
    }
};

template <typename T> struct Float {
    typedef T V;
    static __device__ V load(const char *p, size_t i, int) { return ((const T *)p)[i]; }
    static __device__ void store(char *p, size_t i, int, V v) { ((T *)p)[i] = v; }
    static __device__ V comb(int op, V a, V b)
    {
        switch (op) {
        case NM_OS_SUM: return a + b;
        case NM_OS_PROD: return a * b;
        case NM_OS_MIN: return b < a ? b : a;
        case NM_OS_MAX: return b > a ? b : a;
        default: return a;
        }
    }
};

// MPI's pair types, packed as MPI packs them: the value, then an int (esize = sizeof(T) + 4)
template <typename T> struct Pair {
    struct V {
        T v;
        int i;
    };
    static __device__ V load(const char *p, size_t i, int es)
    {
        V x;
        memcpy(&x.v, p + i * es, sizeof(T));
        memcpy(&x.i, p + i * es + sizeof(T), sizeof(int));
        return x;
    }
    static __device__ void store(char *p, size_t i, int es, V x)
    {
        memcpy(p + i * es, &x.v, sizeof(T));
        memcpy(p + i * es + sizeof(T), &x.i, sizeof(int));
    }
    static __device__ V comb(int op, V a, V b)
    {
        // MINLOC / MAXLOC: the better value; on a tie, the smaller index
        bool better = op == NM_OS_MINLOC ? b.v < a.v : b.v > a.v;
        if (better) return b;
        if (b.v == a.v && b.i < a.i) a.i = b.i;
        return a;
    }
};

// Block b's share of `count` elements of `es` bytes: [lo, hi), starting 16-byte aligned
__device__ __forceinline__ void share(const nm_os_args_t &a, size_t es, size_t *lo, size_t *hi)
{
    const int b = blockIdx.x, nb = gridDim.x;
    size_t align = 1;
    while ((align * es) % 16) align++;
    size_t per = (a.count + nb - 1) / nb;
    per = (per + align - 1) / align * align;
    *lo = min((size_t)a.count, per * b);
    *hi = min((size_t)a.count, *lo + per);
}

__device__ __forceinline__ char *slot(const nm_os_args_t &a, char *win, int p, int q)
{
    return win + (size_t)(p * a.n + q) * a.slot_bytes;
}

// Signal every peer that this block's share is in place, then wait for theirs; false when the
// group was aborted (a waiting block gives up).
__device__ bool signal_wait(const nm_os_args_t &a, int p)
{
    __shared__ int aborted;
    __syncthreads();
    if (threadIdx.x == 0) {
        const int b = blockIdx.x;
        aborted = 0;
        __threadfence_system();
        for (int q = 0; q < a.n; q++)
            if (q != a.rank) st_release_sys(flag_at(a.win[q], a, p, a.rank, b), a.seq);
        for (int q = 0; q < a.n && !aborted; q++) {
            if (q == a.rank) continue;
            const unsigned long long *f = flag_at(a.win[a.rank], a, p, q, b);
            for (unsigned spins = 0; ld_acquire_sys(f) < a.seq;)
                if ((++spins & 1023) == 0 && *a.abort_word) {
                    aborted = 1;
                    break;
                }
        }
    }
    __syncthreads();
    return !aborted;
}

// The last block to finish reports the call complete (when asked to).
__device__ void finish(const nm_os_args_t &a)
{
    if (!a.done_flag) return;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *ctr = (unsigned *)(a.win[a.rank] + a.flags_off + (size_t)2 * a.n * NM_OS_MAX_BLOCKS * 8);
        __threadfence();
        if (atomicAdd(ctr, 1u) == (unsigned)gridDim.x - 1) {
            *ctr = 0;  // the next kernel starts after this one ends
            __threadfence_system();
            st_release_sys(a.done_flag, a.done_ticket);
        }
    }
}

// Allreduce, Reduce, Reduce_scatter_block (count: elements of the result)
template <class P> __device__ void reduce(const nm_os_args_t &a)
{
    const int p = (int)(a.seq & 1);
    const size_t es = (size_t)a.esize;
    size_t lo, hi;
    share(a, es, &lo, &hi);
    const size_t off = lo * es, len = (hi - lo) * es;
    const bool rsb = a.coll == NM_OS_REDUCE_SCATTER_BLOCK;
    // 1. what each peer needs from this rank, into its slot there
    for (int q = 0; q < a.n; q++) {
        if (q == a.rank || (a.coll == NM_OS_REDUCE && q != a.root)) continue;
        const char *src = a.in + (rsb ? (size_t)q * a.count * es : 0) + off;
        copy_bytes(slot(a, a.win[q], p, a.rank) + off, src, len);
    }
    // 2. flags both ways
    const bool ok = signal_wait(a, p);
    // 3. combine ranks 0..n-1 in order (the same bits on every rank)
    const char *own = a.in + (rsb ? (size_t)a.rank * a.count * es : 0);
    if (ok && (a.coll != NM_OS_REDUCE || a.rank == a.root))
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            typename P::V acc = P::load(a.rank == 0 ? own : slot(a, a.win[a.rank], p, 0), i, (int)es);
            for (int q = 1; q < a.n; q++)
                acc = P::comb(a.op, acc, P::load(q == a.rank ? own : slot(a, a.win[a.rank], p, q), i, (int)es));
            P::store(a.out, i, (int)es, acc);
        }
    finish(a);
}

// Bcast (count: bytes; in = out = the buffer) and Allgather (count: bytes per rank)
__device__ void move(const nm_os_args_t &a)
{
    const int p = (int)(a.seq & 1);
    size_t lo, hi;
    share(a, 1, &lo, &hi);
    const size_t len = hi - lo;
    const bool bcast = a.coll == NM_OS_BCAST;
    if (!bcast || a.rank == a.root)
        for (int q = 0; q < a.n; q++)
            if (q != a.rank) copy_bytes(slot(a, a.win[q], p, a.rank) + lo, a.in + lo, len);
    const bool ok = signal_wait(a, p);
    if (ok && bcast && a.rank != a.root) copy_bytes(a.out + lo, slot(a, a.win[a.rank], p, a.root) + lo, len);
    if (ok && !bcast)
        for (int q = 0; q < a.n; q++) {
            char *dst = a.out + (size_t)q * a.count + lo;
            const char *src = q == a.rank ? a.in + lo : slot(a, a.win[a.rank], p, q) + lo;
            if (dst != src) copy_bytes(dst, src, len);  // in place: this rank's block is there
        }
    finish(a);
}

// Ranks sharing a GPU: every contribution is already in place (nm_sh_args_t)
template <class P> __device__ void reduce_direct(const nm_sh_args_t &a)
{
    const int es = a.esize;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += (size_t)gridDim.x * blockDim.x) {
        typename P::V acc = P::load(a.in[0], i, es);
        for (int q = 1; q < a.n; q++) acc = P::comb(a.op, acc, P::load(a.in[q], i, es));
        P::store(a.out, i, es, acc);
    }
}

}  // namespace

// nm_os_allreduce_<kind> (one-shot, oneshot_abi.h) and nm_sh_reduce_<kind> (ranks sharing a GPU)
#define NM_OS_KERNEL(kind, P)                                                                              \
    extern "C" __global__ void __launch_bounds__(NM_OS_THREADS) nm_os_allreduce_##kind(nm_os_args_t a)    \
    {                                                                                                      \
        reduce<P>(a);                                                                                      \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(NM_OS_THREADS) nm_sh_reduce_##kind(nm_sh_args_t a)      \
    {                                                                                                      \
        reduce_direct<P>(a);                                                                               \
    }

extern "C" __global__ void __launch_bounds__(NM_OS_THREADS) nm_os_move(nm_os_args_t a) { move(a); }

NM_OS_KERNEL(i8, Int<int8_t>)
NM_OS_KERNEL(u8, Int<uint8_t>)
NM_OS_KERNEL(i16, Int<int16_t>)
NM_OS_KERNEL(u16, Int<uint16_t>)
NM_OS_KERNEL(i32, Int<int32_t>)
NM_OS_KERNEL(u32, Int<uint32_t>)
NM_OS_KERNEL(i64, Int<int64_t>)
NM_OS_KERNEL(u64, Int<uint64_t>)
NM_OS_KERNEL(f32, Float<float>)
NM_OS_KERNEL(f64, Float<double>)
NM_OS_KERNEL(pair_f32, Pair<float>)
NM_OS_KERNEL(pair_f64, Pair<double>)
NM_OS_KERNEL(pair_i64, Pair<int64_t>)
NM_OS_KERNEL(pair_i32, Pair<int32_t>)
NM_OS_KERNEL(pair_i16, Pair<int16_t>)
