// ncclmpi: NCCL, dlopen'ed at the first device-buffer collective. A host-only program never
// loads it.
#ifndef NM_CORE_NCCL_API_H
#define NM_CORE_NCCL_API_H
#include <nccl.h>
#include "util/status.h"

#define NM_NCCL_REQUIRED(X)                                                                   \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitRankConfig)         \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString)         \
    X(ncclGetLastError) X(ncclAllReduce) X(ncclReduce) X(ncclBroadcast) X(ncclAllGather)       \
    X(ncclReduceScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)
// Present in newer NCCLs only; NULL means "use the grouped send/recv form".
#define NM_NCCL_OPTIONAL(X) X(ncclCommSplit) X(ncclAlltoAll) X(ncclGather) X(ncclScatter)

namespace ncclmpi {

struct NcclApi {
    void *handle = nullptr;
    int version = 0;
#define NM_NCCL_MEMBER(f) decltype(&::f) f = nullptr;
    NM_NCCL_REQUIRED(NM_NCCL_MEMBER)
    NM_NCCL_OPTIONAL(NM_NCCL_MEMBER)
#undef NM_NCCL_MEMBER
};

extern NcclApi nccl;

// NCCLMPI_CONNECT, parsed once (doc/design.md, "Connected at creation")
enum ConnectMode { CONNECT_INIT, CONNECT_ALL, CONNECT_LAZY };
ConnectMode connect_mode();
// MPI_Init, with NCCLMPI_CONNECT=all: NCCL_RUNTIME_CONNECT=0 where the environment does not set
// it, so that NCCL connects its algorithms inside ncclCommInitRank/ncclCommSplit, which ncclmpi
// calls only where every rank of the communicator is (doc/design.md, "Connected at creation").
// NCCL reads the variable once, at the process's first NCCL communicator.
void nccl_connect_setup();
// Load NCCL once (thread-safe). NM_OK, or NM_ERR_NCCL with a logged reason.
nm_status_t nccl_load();
bool nccl_loaded();

// One NCCL call of a launch, recorded while the launch's bodies allocate and pack, and issued in
// one NCCL group after all of them succeeded: a local failure (no device memory, a failed copy)
// is then known before any NCCL call of the group is made (doc/design.md, "Failures end in
// errors"). peer: the root, or a send's or receive's peer; -1 for none.
struct NcclRec {
    enum Kind : unsigned char { ALLREDUCE, REDUCE, BCAST, ALLGATHER, REDUCE_SCATTER, ALLTOALL, GATHER, SCATTER, SEND, RECV } kind;
    int type, op, peer;
    const void *s;
    void *r;
    size_t count;
};
// Issue recs[0..n) on comm and stream s, in order, stopping at the first failure (logged).
ncclResult_t nccl_issue(const NcclRec *recs, size_t n, ncclComm_t comm, cudaStream_t s);

}  // namespace ncclmpi

#define NM_NCCL_CHECK(call, action)                                                           \
    do {                                                                                      \
        ncclResult_t nm_nc_rc_ = (call);                                                      \
        if (nm_nc_rc_ != ncclSuccess && nm_nc_rc_ != ncclInProgress) {                        \
            NM_ERROR(COLL, "%s failed: %s (%s)", #call, ::ncclmpi::nccl.ncclGetErrorString(nm_nc_rc_), \
                     ::ncclmpi::nccl.ncclGetLastError ? ::ncclmpi::nccl.ncclGetLastError(nullptr) : ""); \
            action;                                                                           \
        }                                                                                     \
    } while (0)

#endif
