/* A stand-in for libcuda.so.1 with three GPUs, for machines without one:
 * - `ncclmpi_info -p` (test/unit/info.sh): GPU0-GPU1 NVLink (peer access with native atomics),
 *   GPU0-GPU2 PCIe (peer access only), GPU1-GPU2 no peer access;
 * - counting the host instructions ncclmpi spends on a device-buffer call
 *   (bench/device_overhead.sh): "device memory" is host memory the stand-in allocated and answers
 *   for in cuPointerGetAttributes; streams, events and copies complete at once, in the caller.
 * - one-sided communication on windows in "device memory" (test/unit/rma_device.sh): with
 *   FAKE_CUDA_IPC=1 in the environment, cuMemAlloc memory is shared (a memfd) and CUDA IPC opens
 *   it in another process of the same user (through /proc/PID/fd), so copies through an opened
 *   handle reach the other process's buffer.
 * - collectives of ranks that share a GPU (test/unit/shared_coll.sh): with FAKE_CUDA_KERNELS=1 as
 *   well, the copy kernel and the shared-GPU reductions run in the caller (below, "Kernels").
 * Not a simulator of a GPU: no ordering, no concurrency, no other kernel. What a test checks
 * against the real MPI is ncclmpi's use of these calls.
 * Names go through cuda.h's macros (cuDeviceTotalMem -> cuDeviceTotalMem_v2), as the real driver
 * exports them. */
#define _GNU_SOURCE /* memfd_create */
#include <cuda.h>
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cuda/copyv_abi.h"
#include "core/tl/oneshot/oneshot_abi.h"
#include "fake_fail.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return CUDA_SUCCESS; }
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) { *s = "CUDA_ERROR_FAKE"; return CUDA_SUCCESS; }
static int ndevices(void);
EXPORT CUresult cuDeviceGetCount(int *n) { *n = ndevices(); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int i)
{
    if (i < 0 || i >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    *d = i;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, (size_t)len, "Fake GPU %d", d); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { memset(u->bytes, 0x10 + d, sizeof(u->bytes)); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) { snprintf(bus, (size_t)len, "0000:%02X:00.0", 0x81 + d); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) { *bytes = (size_t)80 << 30; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
       : a == CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS || a == CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED ? 1 : 0;
    return CUDA_SUCCESS;
}
static int peer(CUdevice a, CUdevice b) { return a != b && !((a == 1 && b == 2) || (a == 2 && b == 1)); }
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) { *can = peer(a, b); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute attr, CUdevice a, CUdevice b)
{
    int nvlink = (a == 0 && b == 1) || (a == 1 && b == 0);
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *v = peer(a, b); break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *v = nvlink; break;
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *v = nvlink ? 0 : 1; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}

/* ---- memory, contexts, streams and events, all synchronous ---------------------------------- */
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "stand-in driver error"; return CUDA_SUCCESS; }

enum { NALLOC = 4096 };
static struct { uintptr_t p; size_t n; int host, fd; } allocs[NALLOC];
static int nused;  /* slots below it have been used */

/* Memory of the stand-in is mapped, as the real driver's is: never in malloc's heap or on a stack,
 * where ncclmpi knows host memory without asking (NCCLMPI_HOST_RANGES). */
static void *map_zeroed(size_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static CUresult track_fd(void *p, size_t n, int host, int fd)
{
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < NALLOC; i++)
        if (!allocs[i].p) {
            allocs[i].p = (uintptr_t)p;
            allocs[i].n = n ? n : 1;
            allocs[i].host = host;
            allocs[i].fd = fd;
            if (i >= nused) nused = i + 1;
            return CUDA_SUCCESS;
        }
    munmap(p, n ? n : 1);
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult track(void *p, size_t n, int host) { return track_fd(p, n, host, -1); }
static void untrack(uintptr_t p)
{
    for (int i = 0; i < NALLOC; i++)
        if (allocs[i].p == p) {
            allocs[i].p = 0;
            munmap((void *)p, allocs[i].n);
            if (allocs[i].fd >= 0) close(allocs[i].fd);
            return;
        }
}
static int lookup(uintptr_t p)
{
    static int last;  /* the last hit first: a benchmark asks about the same few buffers */
    if (allocs[last].p && p >= allocs[last].p && p < allocs[last].p + allocs[last].n) return last;
    for (int i = 0; i < nused; i++)
        if (allocs[i].p && p >= allocs[i].p && p < allocs[i].p + allocs[i].n) return last = i;
    return -1;
}

/* FAKE_CUDA_DEVICE_PER_RANK=1: the process's context is on device (world rank % 8), the rank
 * from Open MPI's OMPI_COMM_WORLD_RANK (MPICH's PMI_RANK), as if each rank of a job had a GPU of its own (with the
 * stand-in NCCL's shared-memory mode: NCCL communicators of several ranks); the stand-in then has
 * 8 devices (devices 3 to 7 with peer access to every other one), else 3 */
/* environment variable `name` is "1", read once into *cache (-1: not read yet) */
static int env_on(const char *name, int *cache)
{
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && *e == '1';
    }
    return *cache;
}
static int per_rank(void)
{
    static int p = -1;
    return env_on("FAKE_CUDA_DEVICE_PER_RANK", &p);
}
static int ndevices(void) { return per_rank() ? 8 : 3; }
static int my_device(void)
{
    static int d = -1;
    if (d < 0) {
        const char *r = getenv("OMPI_COMM_WORLD_RANK");  /* (Open MPI; MPICH's Hydra: PMI_RANK) */
        if (!r) r = getenv("PMI_RANK");
        d = per_rank() && r ? atoi(r) % ndevices() : 0;
    }
    return d;
}

/* FAKE_CUDA_ASYNC=1: streams run later, as a GPU's do. Each stream is a queue that a thread of its
 * own runs in order (the legacy stream one more); copies, kernels, memory writes, event records and
 * waits, frees and the stand-in NCCL's calls (fake_cuda_enqueue) go there, and the host's
 * synchronizations wait for them. Without it, everything runs in the caller at once. */
struct fq_item { void (*fn)(void *); void *arg; struct fq_item *next; };
struct fq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fq_item *head, *tail;  /* the head runs until it is done */
    int started;
    unsigned long gen;            /* the context generation it was made in (a reset, below) */
    unsigned long queued, done;   /* items ever enqueued, and run to their end */
    pthread_t runner;             /* its thread, once started */
    struct fq *next_q;            /* every stream of the process (fq_all), for device-wide waits */
    int destroyed;                /* cuStreamDestroy'ed: kept, so that a later use is caught */
};
static struct fq legacy_q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, 0, 0, NULL, 0};
static pthread_mutex_t fq_all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fq *fq_all = &legacy_q;
/* Device resets (cuDevicePrimaryCtxReset, the runtime's cudaDeviceReset): a new generation of the
 * context. As on the real driver (measured on an H200, driver 580): the context's id changes
 * (cuCtxGetId), its memory goes (device and pinned allocations: made inaccessible here, so touching
 * them faults as the real unmapped pinned memory does; registered host memory stays), a call that
 * names one of its streams or records one of its events crashes inside the driver (here: a message
 * and abort), other calls on its events fail with CUDA_ERROR_CONTEXT_IS_DESTROYED. */
EXPORT unsigned long fake_cuda_ctx_gen = 1;
static void stale(const char *what)
{
    fprintf(stderr, "fake_cuda: %s of a CUDA context that was reset (the real driver crashes here)\n", what);
    abort();
}
static int async_on(void)
{
    static int a = -1;
    return env_on("FAKE_CUDA_ASYNC", &a);
}
static struct fq *q_of(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return &legacy_q;
    struct fq *q = (struct fq *)(void *)s;
    if (q->gen != fake_cuda_ctx_gen) stale("a stream");
    if (__atomic_load_n(&q->destroyed, __ATOMIC_ACQUIRE)) {
        fprintf(stderr, "fake_cuda: a stream used after cuStreamDestroy (the real driver crashes here)\n");
        abort();
    }
    return q;
}
static void *fq_run(void *p)
{
    struct fq *q = p;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head) pthread_cond_wait(&q->cv, &q->mu);
        struct fq_item *it = q->head;
        pthread_mutex_unlock(&q->mu);
        it->fn(it->arg);
        free(it->arg);
        pthread_mutex_lock(&q->mu);
        q->head = it->next;
        if (!q->head) q->tail = NULL;
        q->done++;
        free(it);
        pthread_cond_broadcast(&q->cv);
    }
    return NULL;
}
/* fn(a copy of the n bytes at arg) on stream s: later, in order (FAKE_CUDA_ASYNC=1), else now */
EXPORT void fake_cuda_enqueue(CUstream s, void (*fn)(void *), const void *arg, size_t n)
{
    if (!async_on()) {
        fn((void *)(uintptr_t)arg);
        return;
    }
    void *a = malloc(n ? n : 1);
    memcpy(a, arg, n);
    struct fq *q = q_of(s);
    struct fq_item *it = calloc(1, sizeof(*it));
    it->fn = fn;
    it->arg = a;
    pthread_mutex_lock(&q->mu);
    if (!q->started) {
        pthread_t th;
        pthread_create(&th, NULL, fq_run, q);
        pthread_detach(th);
        q->runner = th;
        q->started = 1;
    }
    if (q->tail) q->tail->next = it;
    else q->head = it;
    q->tail = it;
    q->queued++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}
static void fq_drain(struct fq *q)
{
    if (!async_on()) return;
    pthread_mutex_lock(&q->mu);
    while (q->head) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}
/* FAKE_CUDA_FREE_SYNC=1 (with FAKE_CUDA_ASYNC=1): a device-wide synchronisation, as the real
 * cuMemFree makes (cudaFree's implicit one): the
 * caller waits for the work every stream of the process held when it called, NCCL's kernels
 * included, work queued later not waited for. Called from a stream's own thread it would wait for
 * itself: that thread skips its own stream. */
static void fq_device_sync(void)
{
    static int on = -1;
    if (!async_on() || !env_on("FAKE_CUDA_FREE_SYNC", &on)) return;
    pthread_mutex_lock(&fq_all_mu);
    size_t n = 0;
    for (struct fq *q = fq_all; q; q = q->next_q) n++;
    struct fq **qs = malloc(n * sizeof(*qs));
    unsigned long *upto = malloc(n * sizeof(*upto));
    n = 0;
    for (struct fq *q = fq_all; q; q = q->next_q) {
        pthread_mutex_lock(&q->mu);
        qs[n] = q;
        upto[n++] = q->queued;
        pthread_mutex_unlock(&q->mu);
    }
    pthread_mutex_unlock(&fq_all_mu);
    for (size_t i = 0; i < n; i++) {
        struct fq *q = qs[i];
        pthread_mutex_lock(&q->mu);
        while (q->done < upto[i] && !pthread_equal(q->runner, pthread_self())) pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
    }
    free(qs);
    free(upto);
}
static int fq_idle(struct fq *q)
{
    pthread_mutex_lock(&q->mu);
    const int idle = q->head == NULL;
    pthread_mutex_unlock(&q->mu);
    return idle;
}

EXPORT unsigned long fake_cuda_pointer_queries; /* cuPointerGetAttributes calls (test/unit/host_ranges.sh) */
EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **vals, CUdeviceptr p)
{
    fake_cuda_pointer_queries++;
    int i = lookup((uintptr_t)p);
    for (unsigned k = 0; k < n; k++) {
        switch (attrs[k]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(CUmemorytype *)vals[k] = i < 0 ? (CUmemorytype)0 : allocs[i].host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)vals[k] = i < 0 ? -2 : my_device(); break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)vals[k] = 0; break;
        default: break;
        }
    }
    return CUDA_SUCCESS;
}
static CUresult mem_alloc(CUdeviceptr *p, size_t n);
/* FAKE_CUDA_HOLD_TRAP=1: a driver call that is not stream-ordered (an allocation, a free, a
 * registration, an IPC open) made while a test holds the legacy stream (fake_cuda_hold_legacy) is
 * reported on stderr with the caller's stack: the real driver may synchronise in such a call, and
 * an MPI call that makes it would then wait for the held work. The stand-in itself does not wait. */
static int holds;  /* holds queued and not yet released */
static void hold_trap(const char *fn)
{
    static int on = -1;
    if (!__atomic_load_n(&holds, __ATOMIC_ACQUIRE) || !env_on("FAKE_CUDA_HOLD_TRAP", &on)) return;
    char head[160];
    const int k = snprintf(head, sizeof(head), "fake_cuda: %s while the legacy stream is held (pid %d):\n", fn, (int)getpid());
    if (write(2, head, (size_t)k) < 0) {}
    void *pc[24];
    backtrace_symbols_fd(pc, backtrace(pc, 24), 2);
}
EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
    hold_trap("cuMemAlloc");
    if (fake_fail("cuMemAlloc")) return CUDA_ERROR_OUT_OF_MEMORY;
    return mem_alloc(p, n);
}
static CUresult mem_alloc(CUdeviceptr *p, size_t n)
{
    const char *ipc = getenv("FAKE_CUDA_IPC");
    if (ipc && *ipc == '1') {  /* shared, so that another process can open it (cuIpcOpenMemHandle) */
        int fd = memfd_create("fake_cuda", 0);
        void *q = fd >= 0 && ftruncate(fd, (off_t)(n ? n : 1)) == 0
                      ? mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (q == MAP_FAILED) {
            if (fd >= 0) close(fd);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *p = (CUdeviceptr)q;
        return track_fd(q, n, 0, fd);
    }
    void *q = map_zeroed(n);
    *p = (CUdeviceptr)q;
    return track(q, n, 0);
}
EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    int i = lookup((uintptr_t)p);
    if (i < 0) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = (CUdeviceptr)allocs[i].p;
    if (size) *size = allocs[i].n;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree(CUdeviceptr p)
{
    hold_trap("cuMemFree");
    fq_device_sync();
    untrack((uintptr_t)p);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    (void)s;
    if (fake_fail("cuMemAllocAsync")) return CUDA_ERROR_OUT_OF_MEMORY;
    return mem_alloc(p, n);
}
static void free_later(void *a) { untrack((uintptr_t)*(CUdeviceptr *)a); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    fake_cuda_enqueue(s, free_later, &p, sizeof(p));
    return CUDA_SUCCESS;
}
static CUresult host_alloc(void **p, size_t n);
EXPORT CUresult cuMemAllocHost(void **p, size_t n)
{
    hold_trap("cuMemAllocHost");
    if (fake_fail("cuMemAllocHost")) return CUDA_ERROR_OUT_OF_MEMORY;
    return host_alloc(p, n);
}
static CUresult host_alloc(void **p, size_t n)
{
    *p = map_zeroed(n);
    return track(*p, n, 1);
}
EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags)
{
    hold_trap("cuMemHostAlloc");
    (void)flags;
    if (fake_fail("cuMemHostAlloc")) return CUDA_ERROR_OUT_OF_MEMORY;
    return host_alloc(p, n);
}
EXPORT CUresult cuMemFreeHost(void *p)
{
    hold_trap("cuMemFreeHost");
    untrack((uintptr_t)p);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags) { (void)flags; *d = (CUdeviceptr)p; return CUDA_SUCCESS; }
EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    hold_trap("cuMemHostRegister");
    (void)p;
    (void)n;
    (void)flags;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostUnregister(void *p)
{
    hold_trap("cuMemHostUnregister");
    (void)p;
    return CUDA_SUCCESS;
}
EXPORT int fake_cuda_fail_copies; /* nonzero: every copy fails (a test's failure injection) */
EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    if (fake_fail("cuMemcpy")) return CUDA_ERROR_UNKNOWN;
    if (fake_cuda_fail_copies) return CUDA_ERROR_UNKNOWN;
    fq_drain(&legacy_q);  /* (synchronous: after the legacy stream's work) */
    memmove((void *)d, (const void *)s, n);
    return CUDA_SUCCESS;
}
struct copy_args { CUdeviceptr d, s; size_t n; int v; };
static void copy_later(void *a)
{
    const struct copy_args *c = a;
    memmove((void *)c->d, (const void *)c->s, c->n);
}
static void set_later(void *a)
{
    const struct copy_args *c = a;
    memset((void *)c->d, c->v, c->n);
}
EXPORT unsigned long fake_cuda_async_copies; /* cuMemcpyAsync calls that queued (test/unit/self_copy.sh) */
EXPORT CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    if (fake_fail("cuMemcpyAsync")) return CUDA_ERROR_UNKNOWN;
    if (fake_cuda_fail_copies) return CUDA_ERROR_UNKNOWN;
    fake_cuda_async_copies++;
    const struct copy_args c = {d, s, n, 0};
    fake_cuda_enqueue(st, copy_later, &c, sizeof(c));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st)
{
    if (fake_fail("cuMemsetD8Async")) return CUDA_ERROR_UNKNOWN;
    const struct copy_args c = {d, 0, n, v};
    fake_cuda_enqueue(st, set_later, &c, sizeof(c));
    return CUDA_SUCCESS;
}
static void copy2d_later(void *a)
{
    const CUDA_MEMCPY2D *c = a;
    const char *src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (const char *)c->srcHost : (const char *)c->srcDevice;
    char *dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (char *)c->dstHost : (char *)c->dstDevice;
    src += c->srcY * c->srcPitch + c->srcXInBytes;
    dst += c->dstY * c->dstPitch + c->dstXInBytes;
    for (size_t r = 0; r < c->Height; r++) memmove(dst + r * c->dstPitch, src + r * c->srcPitch, c->WidthInBytes);
}
EXPORT CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream st)
{
    if (fake_fail("cuMemcpy2DAsync")) return CUDA_ERROR_UNKNOWN;
    fake_cuda_enqueue(st, copy2d_later, c, sizeof(*c));
    return CUDA_SUCCESS;
}

static int ctx_token;
static CUcontext current;
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&ctx_token; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { current = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { if (!current) return CUDA_ERROR_INVALID_CONTEXT; *d = my_device(); return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetId(CUcontext c, unsigned long long *id) { (void)c; *id = fake_cuda_ctx_gen; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d)
{
    (void)d;
    fq_drain(&legacy_q);
    for (int i = 0; i < nused; i++)
        if (allocs[i].p) {
            mprotect((void *)allocs[i].p, allocs[i].n, PROT_NONE);  /* (the address stays taken) */
            allocs[i].p = 0;
        }
    fake_cuda_ctx_gen++;
    return CUDA_SUCCESS;
}

static int event_token;
/* a handle of its own per stream, as the real driver gives (code that tells streams apart by their
 * handles must see different ones) */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    if (fake_fail("cuStreamCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
    (void)flags;
    struct fq *q = calloc(1, sizeof(*q));
    if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->gen = fake_cuda_ctx_gen;
    pthread_mutex_lock(&fq_all_mu);
    q->next_q = fq_all;
    fq_all = q;
    pthread_mutex_unlock(&fq_all_mu);
    *s = (CUstream)(void *)q;
    return CUDA_SUCCESS;
}
/* (its thread stays, idle, and its memory too: a later use of the handle is caught by q_of) */
EXPORT CUresult cuStreamDestroy(CUstream s)
{
    struct fq *q = q_of(s);
    fq_drain(q);
    if (q != &legacy_q) {
        pthread_mutex_lock(&fq_all_mu);
        for (struct fq **pp = &fq_all; *pp; pp = &(*pp)->next_q)
            if (*pp == q) {
                *pp = q->next_q;
                break;
            }
        pthread_mutex_unlock(&fq_all_mu);
        __atomic_store_n(&q->destroyed, 1, __ATOMIC_RELEASE);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { (void)s; *c = (CUcontext)&ctx_token; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    fq_drain(q_of(s));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamQuery(CUstream s) { return !async_on() || fq_idle(q_of(s)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
struct write_args { CUdeviceptr a; cuuint64_t v; };
static void write_later(void *a)
{
    const struct write_args *w = a;
    __atomic_store_n((cuuint64_t *)w->a, w->v, __ATOMIC_RELEASE);
}
EXPORT CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f)
{
    if (fake_fail("cuStreamWriteValue64")) return CUDA_ERROR_UNKNOWN;
    (void)f;
    const struct write_args w = {a, v};
    fake_cuda_enqueue(s, write_later, &w, sizeof(w));
    return CUDA_SUCCESS;
}
/* Kernels. By default there are none (and CUDA IPC only with FAKE_CUDA_IPC=1): the one-shot path
 * finds no window and stays off. With FAKE_CUDA_KERNELS=1 the module loads, every function
 * resolves, and two kinds run, in the caller, as the GPU's would: the copy kernel (nm_copyv) and
 * the shared-GPU reductions (nm_sh_reduce_<kind> of the plain integer and float kinds, every op
 * MPI defines on them, the contributions combined in rank order); launching any other is
 * CUDA_ERROR_NOT_SUPPORTED. That is enough for the collectives of ranks sharing a GPU
 * (test/unit/shared_coll.sh), whose results are checked against the real MPI's. */
static int kernels_on(void)
{
    const char *k = getenv("FAKE_CUDA_KERNELS");
    return k && *k == '1';
}
static char fake_module;
EXPORT unsigned long fake_cuda_kernel_launches; /* kernels run (test/unit/p2p_burst.sh) */
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    (void)image;
    if (!kernels_on()) return CUDA_ERROR_NOT_SUPPORTED;
    *m = (CUmodule)(void *)&fake_module;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (!kernels_on() || m != (CUmodule)(void *)&fake_module) return CUDA_ERROR_NOT_SUPPORTED;
    *f = (CUfunction)(void *)name;  /* (the library's table of names outlives the module) */
    return CUDA_SUCCESS;
}

/* one element: in[0] op ... op in[n-1], as the kernels combine them */
#define FAKE_RED(T, isint)                                                                   \
    static int red_##T(const nm_sh_args_t *a)                                                \
    {                                                                                        \
        for (unsigned long long i = 0; i < a->count; i++) {                                  \
            T acc = ((const T *)a->in[0])[i];                                                \
            for (int q = 1; q < a->n; q++) {                                                 \
                T v = ((const T *)a->in[q])[i];                                              \
                switch (a->op) {                                                             \
                case NM_OS_SUM: acc = (T)(acc + v); break;                                   \
                case NM_OS_PROD: acc = (T)(acc * v); break;                                  \
                case NM_OS_MIN: acc = v < acc ? v : acc; break;                              \
                case NM_OS_MAX: acc = v > acc ? v : acc; break;                              \
                case NM_OS_LAND: acc = (T)((acc != 0) && (v != 0)); break;                   \
                case NM_OS_LOR: acc = (T)((acc != 0) || (v != 0)); break;                    \
                case NM_OS_LXOR: acc = (T)((acc != 0) != (v != 0)); break;                   \
                default:                                                                     \
                    if (!(isint)) return 0;                                                  \
                    FAKE_BITS(T)                                                             \
                }                                                                            \
            }                                                                                \
            ((T *)a->out)[i] = acc;                                                          \
        }                                                                                    \
        return 1;                                                                            \
    }
#define FAKE_BITS(T)                                                                         \
    {                                                                                        \
        unsigned long long x = (unsigned long long)acc, y = (unsigned long long)v;           \
        if (a->op == NM_OS_BAND) x &= y;                                                     \
        else if (a->op == NM_OS_BOR) x |= y;                                                 \
        else if (a->op == NM_OS_BXOR) x ^= y;                                                \
        else return 0;                                                                       \
        acc = (T)x;                                                                          \
    }
FAKE_RED(int8_t, 1) FAKE_RED(uint8_t, 1) FAKE_RED(int16_t, 1) FAKE_RED(uint16_t, 1)
FAKE_RED(int32_t, 1) FAKE_RED(uint32_t, 1) FAKE_RED(int64_t, 1) FAKE_RED(uint64_t, 1)
#undef FAKE_BITS
#define FAKE_BITS(T) return 0;
FAKE_RED(float, 0) FAKE_RED(double, 0)

static void copyv_later(void *p)
{
    const struct { nm_copyv_args_t a; unsigned n; } *c = p;
    for (unsigned y = 0; y < c->n; y++) memmove(c->a.r[y].dst, c->a.r[y].src, c->a.r[y].bytes);
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, CUstream s, void **params, void **extra)
{
    if (fake_fail("cuLaunchKernel")) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    (void)gx; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)s; (void)extra;
    const char *name = (const char *)(void *)f;
    if (!kernels_on() || !name || !params) return CUDA_ERROR_NOT_SUPPORTED;
    if (!strcmp(name, NM_COPYV_KERNEL)) {
        struct copyv_args { nm_copyv_args_t a; unsigned n; } c;
        c.a = *(const nm_copyv_args_t *)params[0];
        c.n = gy < NM_COPYV_MAX ? gy : NM_COPYV_MAX;
        fake_cuda_enqueue(s, copyv_later, &c, sizeof(c));
        fake_cuda_kernel_launches++;
        return CUDA_SUCCESS;
    }
    fq_drain(q_of(s));  /* (the others run in the caller, after the stream's work) */
    static const char *const kinds[] = {"i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64"};
    static int (*const red[])(const nm_sh_args_t *) = {red_int8_t, red_uint8_t, red_int16_t, red_uint16_t, red_int32_t,
                                                        red_uint32_t, red_int64_t, red_uint64_t, red_float, red_double};
    const char *pre = "nm_sh_reduce_";
    if (strncmp(name, pre, strlen(pre))) return CUDA_ERROR_NOT_SUPPORTED;
    for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (!strcmp(name + strlen(pre), kinds[k])) {
            if (!red[k]((const nm_sh_args_t *)params[0])) return CUDA_ERROR_NOT_SUPPORTED;
            fake_cuda_kernel_launches++;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_SUPPORTED;
}
/* a handle: the allocating process, its memfd and the allocation's size */
struct fake_ipc { int magic, pid, fd; size_t n; };
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    int i = lookup((uintptr_t)p);
    if (i < 0 || allocs[i].host || allocs[i].fd < 0 || allocs[i].p != (uintptr_t)p) return CUDA_ERROR_NOT_SUPPORTED;
    struct fake_ipc f = {0x1dc, (int)getpid(), allocs[i].fd, allocs[i].n};
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &f, sizeof(f));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    hold_trap("cuIpcOpenMemHandle");
    (void)flags;
    struct fake_ipc f;
    memcpy(&f, h.reserved, sizeof(f));
    if (f.magic != 0x1dc) return CUDA_ERROR_INVALID_VALUE;
    if (f.pid == (int)getpid()) return CUDA_ERROR_INVALID_CONTEXT;  /* as the real driver: not in the same process */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", f.pid, f.fd);
    int fd = open(path, O_RDWR);
    if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
    void *q = mmap(NULL, f.n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (q == MAP_FAILED) {
        close(fd);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *p = (CUdeviceptr)q;
    return track_fd(q, f.n, 0, fd);
}
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    hold_trap("cuIpcCloseMemHandle");
    if (lookup((uintptr_t)p) < 0) return CUDA_ERROR_INVALID_VALUE;
    untrack((uintptr_t)p);
    return CUDA_SUCCESS;
}
/* events complete at once: any handle names the one stand-in event */
EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e)
{
    (void)e;
    if (async_on()) return CUDA_ERROR_NOT_SUPPORTED;  /* (an event of its own per handle: not across processes) */
    memset(h, 0, sizeof(*h));
    h->reserved[0] = 0x1e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle h)
{
    hold_trap("cuIpcOpenEventHandle");
    if (h.reserved[0] != 0x1e) return CUDA_ERROR_INVALID_VALUE;
    *e = (CUevent)&event_token;
    return CUDA_SUCCESS;
}
/* FAKE_CUDA_ASYNC=1: an event of its own per handle, standing for its latest record: a record is a
 * flag its stream sets when it gets there, and a stream's wait or the host's query looks at the
 * record the event stood for then (as CUDA's: a later record does not move an earlier wait).
 * Records stay allocated (a stand-in's test is short). */
struct frec { int done; };
struct fev { struct frec *latest; unsigned long gen; };
static struct frec rec_done = {1};
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    if (fake_fail("cuEventCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
    (void)flags;
    if (!async_on()) {
        *e = (CUevent)&event_token;
        return CUDA_SUCCESS;
    }
    struct fev *v = calloc(1, sizeof(*v));
    v->latest = &rec_done;  /* (never recorded: complete) */
    v->gen = fake_cuda_ctx_gen;
    *e = (CUevent)(void *)v;
    return CUDA_SUCCESS;
}
static int ev_stale(CUevent e)
{
    return async_on() && e != (CUevent)&event_token && ((struct fev *)(void *)e)->gen != fake_cuda_ctx_gen;
}
EXPORT CUresult cuEventDestroy(CUevent e) { return ev_stale(e) ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS; }
static void record_later(void *a) { __atomic_store_n(&(*(struct frec **)a)->done, 1, __ATOMIC_RELEASE); }
static int rec_is_done(struct frec *r) { return __atomic_load_n(&r->done, __ATOMIC_ACQUIRE); }
static void wait_later(void *a)
{
    struct frec *r = *(struct frec **)a;
    while (!rec_is_done(r)) sched_yield();
}
static struct frec *latest(CUevent e) { return __atomic_load_n(&((struct fev *)(void *)e)->latest, __ATOMIC_ACQUIRE); }
/* A test's hold on the legacy stream (FAKE_CUDA_ASYNC=1): work that waits there until *release is
 * nonzero, as an application's kernel that waits for its host (test/unit/legacy_hold_prog.c).
 * Everything queued on the legacy stream later, and every wait for it, waits behind it. */
static void hold_later(void *a)
{
    volatile int *release = *(volatile int **)a;
    while (!__atomic_load_n(release, __ATOMIC_ACQUIRE)) sched_yield();
    __atomic_sub_fetch(&holds, 1, __ATOMIC_RELEASE);
}
EXPORT int fake_cuda_hold_legacy(volatile int *release)
{
    if (!async_on()) return 0;
    __atomic_add_fetch(&holds, 1, __ATOMIC_ACQUIRE);
    fake_cuda_enqueue(CU_STREAM_LEGACY, hold_later, &release, sizeof(release));
    return 1;
}
/* events recorded on the legacy stream (bench/device_overhead prints how many a call made) */
EXPORT unsigned long fake_cuda_legacy_records;
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    if (fake_fail("cuEventRecord")) return CUDA_ERROR_UNKNOWN;
    if (s == CU_STREAM_LEGACY) fake_cuda_legacy_records++;
    if (!async_on()) return CUDA_SUCCESS;
    if (ev_stale(e)) stale("an event record");
    struct frec *r = calloc(1, sizeof(*r));
    __atomic_store_n(&((struct fev *)(void *)e)->latest, r, __ATOMIC_RELEASE);
    fake_cuda_enqueue(s, record_later, &r, sizeof(r));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f)
{
    (void)f;
    if (!async_on()) return CUDA_SUCCESS;
    if (ev_stale(e)) stale("a wait for an event");
    struct frec *r = latest(e);
    if (!rec_is_done(r)) fake_cuda_enqueue(s, wait_later, &r, sizeof(r));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e)
{
    if (ev_stale(e)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return !async_on() || rec_is_done(latest(e)) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    CUresult r;
    while ((r = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) sched_yield();
    return r;
}
