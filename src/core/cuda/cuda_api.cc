// ncclmpi: CUDA driver entry points from the libcuda already loaded by the application.
#include "core/cuda/cuda_api.h"

#include <dlfcn.h>

#include <atomic>

#include "util/config.h"
#include "util/log.h"

#define NM_STR_(x) #x
#define NM_XSTR(x) NM_STR_(x)

namespace ncclmpi {

CudaApi cu;
static bool attached;

bool cuda_attached() { return attached; }

bool cuda_attach()
{
    if (attached) return true;
    // RTLD_NOLOAD: use the driver only if the application brought it in; a host-only program
    // never loads it because of us.
    void *h = dlopen(nm_cfg.CUDA_LIB, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    if (!h) return false;
    CudaApi api;
    api.handle = h;
    bool ok = true;
#define NM_CU_LOAD(f)                                                                         \
    api.f = reinterpret_cast<decltype(api.f)>(dlsym(h, NM_XSTR(f)));                          \
    if (!api.f) {                                                                             \
        NM_WARN(INIT, "CUDA driver entry point %s not found in %s", NM_XSTR(f), nm_cfg.CUDA_LIB); \
        ok = false;                                                                           \
    }
    NM_CU_FUNCTIONS(NM_CU_LOAD)
#undef NM_CU_LOAD
    if (!ok) return false;
    api.cuCtxGetId = reinterpret_cast<decltype(api.cuCtxGetId)>(dlsym(h, "cuCtxGetId"));
    cu = api;
    __atomic_store_n(&attached, true, __ATOMIC_RELEASE);
    NM_INFO(INIT, "CUDA driver attached (%s)", nm_cfg.CUDA_LIB);
    return true;
}

bool cuda_load()
{
    if (attached) return true;
    if (!dlopen(nm_cfg.CUDA_LIB, RTLD_NOW | RTLD_GLOBAL)) {
        NM_WARN(INIT, "cannot load the CUDA driver (%s): %s", nm_cfg.CUDA_LIB, dlerror());
        return false;
    }
    if (!cuda_attach()) return false;
    const CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) NM_WARN(INIT, "cuInit failed: %s", cuda_errstr(r));
    return r == CUDA_SUCCESS;
}

// ---- device resets ---------------------------------------------------------------------------
namespace {
constexpr int kNoted = 64;  // devices noted (a device beyond: never checked)
struct Noted {
    std::atomic<int> state{0};  // 0 not noted, 1 being noted, 2 noted
    CUcontext ctx = nullptr;
    unsigned long long id = 0;
};
Noted noted[kNoted];
std::atomic<int> top{0};  // above the highest device noted
std::atomic<bool> lost{false};

bool mark_lost(int dev)
{
    if (!lost.exchange(true))
        NM_INFO(INIT, "the CUDA context of device %d was reset (cudaDeviceReset) after ncclmpi worked on it: ncclmpi "
                "leaves what it held there and takes no device buffers from now on", dev);
    return false;
}

bool check(int dev)
{
    Noted &n = noted[dev];
    int st = n.state.load(std::memory_order_acquire);
    if (st == 1) return true;  // (another thread notes it now)
    if (st == 0) {
        if (!n.state.compare_exchange_strong(st, 1)) return true;
        CUdevice d;
        if (cu.cuDeviceGet(&d, dev) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&n.ctx, d) != CUDA_SUCCESS ||
            cu.cuCtxGetId(n.ctx, &n.id) != CUDA_SUCCESS) {
            n.state.store(0, std::memory_order_release);  // (tried again at the next call)
            return true;
        }
        n.state.store(2, std::memory_order_release);
        for (int t = top.load(); t < dev + 1 && !top.compare_exchange_weak(t, dev + 1);) {}
        return true;
    }
    unsigned long long id = 0;
    return (cu.cuCtxGetId(n.ctx, &id) == CUDA_SUCCESS && id == n.id) || mark_lost(dev);
}
}  // namespace

bool cuda_ctx_current(int dev)
{
    if (__builtin_expect(lost.load(std::memory_order_relaxed), 0)) return false;
    if (!cu.cuCtxGetId || dev >= kNoted) return true;
    if (dev >= 0) return check(dev);
    for (int i = 0, n = top.load(std::memory_order_acquire); i < n; i++)
        if (noted[i].state.load(std::memory_order_acquire) == 2 && !check(i)) return false;
    return true;
}

const char *cuda_errstr(CUresult r)
{
    const char *s = nullptr;
    if (cu.cuGetErrorString && cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "unknown CUDA error";
}

}  // namespace ncclmpi
