// ncclmpi: buffer classification and the watch on loaded libraries.
#include "core/cuda/memkind.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
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
    struct link_map *t = __atomic_load_n(&nm_hot.tail, __ATOMIC_RELAXED);  // (written under linkmap_mu only)
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
    __atomic_store_n(&nm_hot.tail, t, __ATOMIC_RELEASE);  // (other threads read it without the lock)
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
    if (probed.load(std::memory_order_acquire) &&
        !__atomic_load_n(&__atomic_load_n(&nm_hot.tail, __ATOMIC_ACQUIRE)->l_next, __ATOMIC_ACQUIRE))
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

// Memory the CUDA driver never hands out, known without asking it (a pointer query costs
// 0.1-0.16 us for host memory): the live part of the calling thread's stack (from the caller's
// frame to the stack's top, while the caller runs on that stack), the program break's range
// (malloc's main arena: small and medium allocations of the main thread), and the main program's
// own writable segments (static data, Fortran COMMON blocks and module variables). The driver
// maps device, managed and its own pinned memory with mmap, into address ranges it reserves
// itself; none of these ranges can hold such a mapping while it is live. (Host memory registered
// with cudaHostRegister is still host memory.)
namespace {
uintptr_t heap_lo = UINTPTR_MAX;   // the start of the program break's range
struct Range {
    uintptr_t lo, hi;
};
Range statics[4];  // the main program's writable segments
int nstatics;
// the calling thread's stack (stack_hi 0: not looked up yet; 1: unknown)
thread_local uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
thread_local uintptr_t stack_hi __attribute__((tls_model("initial-exec")));

void known_ranges_init()
{
    heap_lo = (uintptr_t)sbrk(0);  // (before any allocation of ours; refined from the maps below)
    if (FILE *f = fopen("/proc/self/maps", "r")) {
        char line[512];
        while (fgets(line, sizeof(line), f)) {
            unsigned long lo = 0, hi = 0;
            if (strstr(line, "[heap]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2) heap_lo = lo;
        }
        fclose(f);
    }
    dl_iterate_phdr(
        [](struct dl_phdr_info *info, size_t, void *) -> int {
            for (int i = 0; i < info->dlpi_phnum; i++) {  // the first object is the main program
                const ElfW(Phdr) &ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
                if (nstatics < 4) statics[nstatics++] = Range{info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
            }
            return 1;
        },
        nullptr);
}

uintptr_t stack_top()
{
    if (stack_hi) return stack_hi;
    pthread_attr_t a;
    void *addr = nullptr;
    size_t size = 0;
    stack_hi = 1;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &addr, &size) == 0 && addr) {
            stack_lo = (uintptr_t)addr;
            stack_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&a);
    }
    return stack_hi;
}
}  // namespace

// glibc's current break (what sbrk(0) returns, without the call), where the C library has it
extern "C" void *__curbrk __attribute__((weak));

extern "C" int nm_mem_known_host(const void *p)
{
    const uintptr_t a = (uintptr_t)p, frame = (uintptr_t)__builtin_frame_address(0);
    // (only while running on the thread's own stack: a user-level thread or coroutine runs on
    // memory of its own, from where the range up to the thread's stack top spans anything)
    const uintptr_t top = stack_top();
    if (a >= frame && a < top && frame >= stack_lo) return 1;
    for (int i = 0; i < nstatics; i++)
        if (a >= statics[i].lo && a < statics[i].hi) return 1;
    if (a < heap_lo) return 0;
    return a < (uintptr_t)(&__curbrk ? __curbrk : sbrk(0));
}

extern "C" nm_memkind_t nm_mem_kind(const void *p, int *dev)
{
    if (!p || p == MPI_IN_PLACE || p == MPI_BOTTOM || !cuda_attached()) return NM_MEM_HOST;
    if (nm_cfg.HOST_RANGES && nm_mem_known_host(p)) return NM_MEM_HOST;
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

extern "C" int nm_mem_device(const void *p, int *dev)
{
    if (!cuda_attached() && !nm_linkmap_refresh()) return 0;
    nm_memkind_t k = nm_mem_kind(p, dev);
    return k == NM_MEM_DEVICE || (k == NM_MEM_MANAGED && managed_as_device);
}

extern "C" int nm_mem_is_device(const void *p) { return nm_mem_device(p, nullptr); }

extern "C" int nm_gpu_node(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
}

__attribute__((constructor)) static void nm_memkind_boot()
{
    nm_config_load();
    known_ranges_init();
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
