// ncclmpi: the library's kernels, one module per context (kernels.h).
#include "core/cuda/kernels.h"

#include <string.h>

#include <deque>
#include <mutex>

#include "core/cuda/cuda_api.h"
#include "util/config.h"

extern "C" {
extern const unsigned char nm_kernels_fatbin[];  // src/gen/kernels_fatbin.c (tools/embed.py)
extern const unsigned long nm_kernels_fatbin_size;
}

namespace ncclmpi {

bool kernels_built() { return nm_kernels_fatbin_size > 0; }

namespace {
struct Module {
    CUcontext ctx;
    CUfunction fn[NM_K_COUNT];
    std::string why;  // empty: loaded
};
std::mutex modules_mu;
std::deque<Module> modules;  // (a deque: tables handed out stay where they are)
}  // namespace

const CUfunction *kernels(CUcontext ctx, std::string *why)
{
    std::lock_guard<std::mutex> g(modules_mu);
    for (const Module &m : modules)
        if (m.ctx == ctx) {  // loaded, or failed to (not tried again)
            if (m.why.empty()) return m.fn;
            *why = m.why;
            return nullptr;
        }
    static const char *const names[NM_K_COUNT] = {NM_OS_KERNEL_NAMES, NM_OS_MOVE_KERNEL, NM_COPYV_KERNEL,
                                                   NM_SH_KERNEL_NAMES};
    modules.emplace_back();
    Module &m = modules.back();
    m.ctx = ctx;
    CUmodule mod = nullptr;
    CUresult r = CUDA_SUCCESS;
    if (!kernels_built())
        m.why = "built without kernels";
    else if ((r = cu.cuModuleLoadData(&mod, nm_kernels_fatbin)) != CUDA_SUCCESS)
        m.why = std::string("cuModuleLoadData: ") + cuda_errstr(r);
    for (int i = 0; i < NM_K_COUNT && m.why.empty(); i++)
        if ((r = cu.cuModuleGetFunction(&m.fn[i], mod, names[i])) != CUDA_SUCCESS)
            m.why = std::string("cuModuleGetFunction(") + names[i] + "): " + cuda_errstr(r);
    // (a module that lacks a function stays loaded: a few kilobytes, once)
    if (m.why.empty()) return m.fn;
    *why = m.why;
    return nullptr;
}

bool copyv_batchable(const void *dst, const void *src, size_t n, size_t limit)
{
    return n <= limit && (((uintptr_t)dst | (uintptr_t)src) & 15) == 0 && kernels_built();
}

// one launch of up to NM_COPYV_MAX regions
static CUresult launch_copyv(const CUfunction *fn, const nm_copyv_region_t *r, int n, CUstream s)
{
    nm_copyv_args_t a;
    memset(&a, 0, sizeof(a));
    unsigned long long most = 0;
    for (int i = 0; i < n; i++) {
        a.r[i] = r[i];
        if (r[i].bytes > most) most = r[i].bytes;
    }
    // one 16-byte word per thread up to 128 blocks per region: many loads in flight, since a
    // peer's memory is a few microseconds away
    const unsigned long long per_block = 16ull * NM_COPYV_THREADS;
    unsigned x = (unsigned)((most + per_block - 1) / per_block);
    x = x < 1 ? 1 : x > 128 ? 128 : x;
    void *params[] = {&a};
    return cu.cuLaunchKernel(fn[NM_K_COPYV], x, (unsigned)n, 1, NM_COPYV_THREADS, 1, 1, 0, s, params, nullptr);
}

CUresult copy_regions(CUcontext ctx, const nm_copyv_region_t *r, size_t n, CUstream s)
{
    std::string why;
    const CUfunction *fn = n > 1 ? kernels(ctx, &why) : nullptr;
    for (size_t i = 0; i < n;) {
        const size_t left = n - i;
        // one region left: the copy engine starts sooner than a kernel (2xH200: 3-4 us less per
        // exchange); without the kernel, one driver copy each
        if (!fn || left == 1) {
            const CUresult e = cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)r[i].dst, (CUdeviceptr)(uintptr_t)r[i].src, r[i].bytes, s);
            if (e != CUDA_SUCCESS) return e;
            i++;
            continue;
        }
        const int k = (int)(left < NM_COPYV_MAX ? left : NM_COPYV_MAX);
        if (launch_copyv(fn, r + i, k, s) != CUDA_SUCCESS) {  // (a launch refused: these as driver copies)
            fn = nullptr;
            continue;
        }
        i += (size_t)k;
    }
    return CUDA_SUCCESS;
}

}  // namespace ncclmpi
