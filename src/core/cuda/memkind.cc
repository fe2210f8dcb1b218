// ncclmpi: buffer classification and the watch on loaded libraries.
#include "core/cuda/memkind.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "core/cuda/cuda_api.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

// Until the constructor below runs, the wrappers see a tail whose l_next is set and take the
// slow path, which refreshes.
static struct link_map nm_boot_next;
static struct link_map nm_boot_tail = {0, nullptr, nullptr, &nm_boot_next, nullptr};
extern "C" {
nm_hot_t nm_hot = {0, 0, 0, &nm_boot_tail};
}

namespace ncclmpi {

static std::mutex linkmap_mu;
static bool managed_as_device = true;

static bool is_cuda_driver(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libcuda.so", 10) == 0;
}

// Walk the objects after the remembered tail; pin the new tail so it cannot be unloaded under us.
static bool refresh_locked()
{
    struct link_map *t = nm_hot.tail;
    bool saw_cuda = false;
    if (t == &nm_boot_tail) {
        t = _r_debug.r_map;
        if (t && t->l_name && is_cuda_driver(t->l_name)) saw_cuda = true;
    }
    while (t && t->l_next) {
        t = t->l_next;
        if (t->l_name && is_cuda_driver(t->l_name)) saw_cuda = true;
    }
    if (!t || t == nm_hot.tail) return saw_cuda;  // nothing new
    if (t->l_name && t->l_name[0]) dlopen(t->l_name, RTLD_LAZY | RTLD_NOLOAD); // keep it mapped
    nm_hot.tail = t;
    return saw_cuda;
}

}  // namespace ncclmpi

using namespace ncclmpi;

// NCCLMPI_P2P_ENVELOPE: every receive must decode, also where no CUDA driver is loaded
extern "C" {
int nm_envelopes_configured = 0;
}

static std::atomic<bool> probed{false};  // whether the driver came in with the executable was asked

extern "C" int nm_linkmap_refresh(void)
{
    // nothing loaded since the last look (no lock: slow-path host calls come here on every call)
    if (probed.load(std::memory_order_acquire) && !__atomic_load_n(&nm_hot.tail->l_next, __ATOMIC_ACQUIRE))
        return cuda_attached();
    std::lock_guard<std::mutex> g(linkmap_mu);
    bool saw = refresh_locked();
    if ((saw || !probed.load(std::memory_order_relaxed)) && !cuda_attached()) {
        // The driver may also have come in with the executable (linked -lcuda): asked once (a
        // dlopen costs about 28000 instructions; slow-path calls of processes without CUDA come
        // here on every call), afterwards only when the link map grew.
        const bool first = !probed.load(std::memory_order_relaxed);
        if (saw || (first && dlopen(nm_cfg.CUDA_LIB, RTLD_LAZY | RTLD_NOLOAD))) {
            if (cuda_attach()) {
                managed_as_device = strcmp(nm_cfg.MANAGED, "host") != 0;
                __atomic_store_n(&nm_hot.slow, 1, __ATOMIC_RELEASE);
            }
        }
    }
    probed.store(true, std::memory_order_release);
    return cuda_attached();
}

extern "C" nm_memkind_t nm_mem_kind(const void *p, int *dev)
{
    if (!p || p == MPI_IN_PLACE || p == MPI_BOTTOM || !cuda_attached()) return NM_MEM_HOST;
    CUmemorytype type = (CUmemorytype)0;
    int ordinal = -1;
    unsigned managed = 0;
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *vals[3] = {&type, &ordinal, &managed};
    // Host memory unknown to CUDA answers success with type 0, or an error before cuInit.
    if (cu.cuPointerGetAttributes(3, attrs, vals, (CUdeviceptr)p) != CUDA_SUCCESS) return NM_MEM_HOST;
    if (dev) *dev = ordinal;
    if (managed) return NM_MEM_MANAGED;
    if (type == CU_MEMORYTYPE_DEVICE) return NM_MEM_DEVICE;
    if (type == CU_MEMORYTYPE_HOST) return NM_MEM_PINNED;
    return NM_MEM_HOST;
}

extern "C" int nm_mem_is_device(const void *p)
{
    if (!cuda_attached() && !nm_linkmap_refresh()) return 0;
    nm_memkind_t k = nm_mem_kind(p, nullptr);
    return k == NM_MEM_DEVICE || (k == NM_MEM_MANAGED && managed_as_device);
}

extern "C" int nm_gpu_node(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
}

__attribute__((constructor)) static void nm_memkind_boot()
{
    nm_config_load();
    // NCCLMPI_AGREE: every collective of every rank must vote, also where no CUDA driver is loaded
    if (nm_cfg.AGREE && !nm_cfg.DISABLE) nm_hot.slow = 1;
    // NCCLMPI_P2P_ENVELOPE: every point-to-point receive decodes what it got (the wrappers of
    // receives and probes test this flag; MPI_Init clears it where the ranks turn them off: auto
    // needs GPUs on this machine); in the host test mode host sends go as envelopes too
    nm_envelopes_configured = strcmp(nm_cfg.P2P_ENVELOPE, "off") != 0 && !nm_cfg.DISABLE &&
                              (strcmp(nm_cfg.P2P_ENVELOPE, "auto") != 0 || nm_gpu_node());
    if (nm_envelopes_configured && !strcmp(nm_cfg.P2P_ENVELOPE, "host")) nm_hot.slow = 1;
    // NCCLMPI_LOG=TRACE: every intercepted call is traced, also where no CUDA driver is loaded
    if (nm_cfg.LOG >= NM_LOG_TRACE && !nm_cfg.DISABLE) {
        nm_hot.slow = 1;
        __atomic_or_fetch(&nm_hot.queued, NM_TRACE_BIT, __ATOMIC_RELAXED);  // every wrapper traces
    }
    nm_linkmap_refresh();
}
