// ncclmpi: CUDA driver entry points from the libcuda already loaded by the application.
#include "core/cuda/cuda_api.h"

#include <dlfcn.h>

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

const char *cuda_errstr(CUresult r)
{
    const char *s = nullptr;
    if (cu.cuGetErrorString && cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "unknown CUDA error";
}

}  // namespace ncclmpi
