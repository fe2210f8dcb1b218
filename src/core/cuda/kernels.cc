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
    auto driver = [s](const nm_copyv_region_t &x) {
        return cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)x.dst, (CUdeviceptr)(uintptr_t)x.src, x.bytes, s);
    };
    nm_copyv_region_t batch[NM_COPYV_MAX];
    int nb = 0;
    // a batch of one: the copy engine starts sooner than a kernel (2xH200: 3-4 us less per
    // exchange); a launch refused: the batch as driver copies, and every later region
    auto flush = [&]() {
        CUresult e = CUDA_SUCCESS;
        if (nb > 1 && launch_copyv(fn, batch, nb, s) == CUDA_SUCCESS) nb = 0;
        else if (nb > 1) fn = nullptr;
        for (int i = 0; i < nb && e == CUDA_SUCCESS; i++) e = driver(batch[i]);
        nb = 0;
        return e;
    };
    for (size_t i = 0; i < n; i++) {
        // the kernel moves 16-byte words: a region not on such boundaries goes as a driver copy
        if (!fn || (((uintptr_t)r[i].dst | (uintptr_t)r[i].src) & 15)) {
            const CUresult e = driver(r[i]);
            if (e != CUDA_SUCCESS) return e;
            continue;
        }
        batch[nb++] = r[i];
        if (nb == NM_COPYV_MAX) {
            const CUresult e = flush();
            if (e != CUDA_SUCCESS) return e;
        }
    }
    return flush();
}

}  // namespace ncclmpi
