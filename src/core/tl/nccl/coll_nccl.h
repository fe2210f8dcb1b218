// ncclmpi: the NCCL bodies of the collectives (the op table's `nccl` column) and the call context
// they run in. A body posts NCCL calls for one op inside the group its flush opened; it sees the
// user's buffers only through seg(), which returns dense device bytes: the buffer itself when its
// layout is contiguous device memory, else a scratch copy packed before the group and unpacked
// after it (non-contiguous datatypes, host memory on a device rank).
#ifndef NM_CORE_COLL_NCCL_H
#define NM_CORE_COLL_NCCL_H
#include <stddef.h>

#include <vector>

#include "core/comm/process_group.h"
#include "core/engine/op.h"
#include "core/tl/nccl/fuse.h"

namespace ncclmpi {

enum { SEG_SEND = 0, SEG_RECV = 1 };

class NcclCall {
  public:
    NcclCall(Op &op, ProcessGroup &pg, CUstream s, bool alone, std::vector<NcclRec> *recs)
        : op(op), pg(pg), s(s), alone(alone), recs(recs) {}
    Op &op;
    ProcessGroup &pg;
    CUstream s;
    bool alone;  // the op is launched by itself (a group of one)
    std::vector<NcclRec> *recs;  // the launch's NCCL calls, issued after every body ran
    nm_status_t st = NM_OK;  // first failure inside seg() / scratch()
    FuseSlot *fuse = nullptr;  // an allreduce that shares an NCCL call (fuse.h): its bytes go there

    // Record one NCCL call of the body (nccl_api.h, NcclRec); peer: the root, or the peer of a
    // send or receive. The launch issues it in the group once every body of the group succeeded.
    nm_status_t call(NcclRec::Kind k, const void *sbuf, void *rbuf, size_t count, int type, int redop = 0, int peer = -1)
    {
        recs->push_back(NcclRec{k, type, redop, peer, sbuf, rbuf, count});
        return NM_OK;
    }
    // `count` elements of the send (SEG_SEND) or receive (SEG_RECV) buffer starting `elem`
    // extents from its pointer, as dense device bytes; dir: BUF_IN / BUF_OUT / BUF_INOUT.
    char *seg(int which, int dir, size_t elem, size_t count);
    size_t bytes(int which, size_t count) const { return count * op.info(which).size; }
    // device scratch that lives until the op's post copies ran
    void *scratch(size_t bytes);
    // device-to-device copy on the op's stream before the group's kernels / after them
    nm_status_t d2d(void *dst, const void *src, size_t bytes);
    void post_d2d(void *dst, const void *src, size_t bytes);
};

// Post copies of a launched op, queued on s after its group (device unpacks, copies to pinned
// bounce buffers), and the host side of them once the op completed.
nm_status_t op_post_stream(Op &op, CUstream s);
void op_post_host(Op &op);
// Release the op's scratch (on s) and bounce buffers.
void op_release_resources(Op &op, CUstream s);
// Kinds where a rank may have nothing to contribute (NM_KF_AMBIG): such a rank makes the real
// MPI call with its zero counts. The ranks that run the data over NCCL make the same call with
// zero counts, blocking for a blocking call (blocking and nonblocking collectives do not match),
// so the real MPI sees the same collective on every rank. Nonblocking: the request is op.carrier.
int nccl_carrier(Op &op, bool blocking);

}  // namespace ncclmpi
#endif
