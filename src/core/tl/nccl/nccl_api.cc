// ncclmpi: lazy NCCL loader.
#include "core/tl/nccl/nccl_api.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

NcclApi nccl;
static bool loaded;
static std::once_flag once;
static nm_status_t load_status = NM_ERR_NCCL;

bool nccl_loaded() { return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE); }

ConnectMode connect_mode()
{
    static const ConnectMode m = !strcmp(nm_cfg.CONNECT, "lazy") ? CONNECT_LAZY
                                 : !strcmp(nm_cfg.CONNECT, "all") ? CONNECT_ALL : CONNECT_INIT;
    return m;
}

void nccl_connect_setup()
{
    if (connect_mode() != CONNECT_ALL) return;
    const char *v = nm_config_foreign("NCCL_RUNTIME_CONNECT");
    if (v && strcmp(v, "0")) {
        NM_INFO(INIT, "NCCL_RUNTIME_CONNECT=%s is set: NCCL connects each algorithm at its first use", v);
        return;
    }
    if (!v) setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    if (void *h = dlopen(nm_cfg.NCCL_LIB, RTLD_NOW | RTLD_NOLOAD)) {
        NM_INFO(INIT, "NCCL was in the process before ncclmpi loaded it: communicators the application made "
                "before may have fixed NCCL_RUNTIME_CONNECT already");
        dlclose(h);
    }
}

static void do_load()
{
    void *h = dlopen(nm_cfg.NCCL_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        NM_ERROR(INIT, "cannot load NCCL from %s (%s); set NCCLMPI_NCCL_LIB", nm_cfg.NCCL_LIB, dlerror());
        return;
    }
    NcclApi api;
    api.handle = h;
#define NM_NCCL_LOAD(f)                                                                       \
    api.f = reinterpret_cast<decltype(api.f)>(dlsym(h, #f));                                  \
    if (!api.f) {                                                                             \
        NM_ERROR(INIT, "NCCL entry point %s missing in %s", #f, nm_cfg.NCCL_LIB);             \
        return;                                                                               \
    }
    NM_NCCL_REQUIRED(NM_NCCL_LOAD)
#undef NM_NCCL_LOAD
#define NM_NCCL_LOAD_OPT(f) api.f = reinterpret_cast<decltype(api.f)>(dlsym(h, #f));
    NM_NCCL_OPTIONAL(NM_NCCL_LOAD_OPT)
#undef NM_NCCL_LOAD_OPT
    api.ncclGetVersion(&api.version);
    nccl = api;
    load_status = NM_OK;
    __atomic_store_n(&loaded, true, __ATOMIC_RELEASE);
    NM_INFO(INIT, "NCCL %d loaded from %s (alltoall %s, gather/scatter %s, split %s)", api.version,
            nm_cfg.NCCL_LIB, api.ncclAlltoAll ? "native" : "send/recv",
            api.ncclGather ? "native" : "send/recv", api.ncclCommSplit ? "yes" : "no");
}

nm_status_t nccl_load()
{
    std::call_once(once, do_load);
    return load_status;
}

}  // namespace ncclmpi

extern "C" __attribute__((visibility("default"))) int ncclmpi_nccl_loaded(void)
{
    return ncclmpi::nccl_loaded() ? 1 : 0;
}

namespace ncclmpi {

ncclResult_t nccl_issue(const NcclRec *recs, size_t n, ncclComm_t comm, cudaStream_t s)
{
    for (size_t i = 0; i < n; i++) {
        const NcclRec &c = recs[i];
        const ncclDataType_t t = (ncclDataType_t)c.type;
        const ncclRedOp_t op = (ncclRedOp_t)c.op;
        ncclResult_t r = ncclSuccess;
        switch (c.kind) {
        case NcclRec::ALLREDUCE: r = nccl.ncclAllReduce(c.s, c.r, c.count, t, op, comm, s); break;
        case NcclRec::REDUCE: r = nccl.ncclReduce(c.s, c.r, c.count, t, op, c.peer, comm, s); break;
        case NcclRec::BCAST: r = nccl.ncclBroadcast(c.s, c.r, c.count, t, c.peer, comm, s); break;
        case NcclRec::ALLGATHER: r = nccl.ncclAllGather(c.s, c.r, c.count, t, comm, s); break;
        case NcclRec::REDUCE_SCATTER: r = nccl.ncclReduceScatter(c.s, c.r, c.count, t, op, comm, s); break;
        case NcclRec::ALLTOALL: r = nccl.ncclAlltoAll(c.s, c.r, c.count, t, comm, s); break;
        case NcclRec::GATHER: r = nccl.ncclGather(c.s, c.r, c.count, t, c.peer, comm, s); break;
        case NcclRec::SCATTER: r = nccl.ncclScatter(c.s, c.r, c.count, t, c.peer, comm, s); break;
        case NcclRec::SEND: r = nccl.ncclSend(c.s, c.count, t, c.peer, comm, s); break;
        case NcclRec::RECV: r = nccl.ncclRecv(c.r, c.count, t, c.peer, comm, s); break;
        }
        if (r != ncclSuccess && r != ncclInProgress) {
            NM_ERROR(COLL, "NCCL call %zu of %zu of the group (kind %d, %zu elements) failed: %s (%s)", i + 1, n, (int)c.kind,
                     c.count, nccl.ncclGetErrorString(r), nccl.ncclGetLastError ? nccl.ncclGetLastError(comm) : "");
            return r;
        }
    }
    return ncclSuccess;
}

}  // namespace ncclmpi
