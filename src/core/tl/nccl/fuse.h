// ncclmpi: small allreduces of one launched group sharing one NCCL call (NCCLMPI_FUSE; the plan:
// route.h, "fused"). Each fused op's body hands its dense send and receive bytes to its slot
// instead of calling NCCL; after the group's bodies the fusion packs each call's slots into one
// device buffer (copy-kernel launches of up to 64 regions), records its ncclAllReduce for the group,
// and after the group's end unpacks into each op's receive bytes, before the ops' own post copies.
#ifndef NM_CORE_TL_NCCL_FUSE_H
#define NM_CORE_TL_NCCL_FUSE_H
#include <stddef.h>

#include <vector>

#include "core/comm/process_group.h"
#include "core/cuda/copyv_abi.h"
#include "core/engine/op.h"
#include "core/tl/nccl/nccl_api.h"
#include "route/route.h"

namespace ncclmpi {

struct FuseSlot {
    const char *src = nullptr;  // the op's dense send bytes (its receive bytes when in place)
    char *dst = nullptr;        // its dense receive bytes
};

class Fusion {
  public:
    // Plans ops[0..n) (their group-wide one-shot choice made); false when none is fused.
    bool plan(Op *const *ops, int n, int comm_size);
    // Op i's slot, or null when it runs as its own NCCL call.
    FuseSlot *slot(int i) { return bucket_[i] >= 0 ? &slots_[i] : nullptr; }
    // After every body, before the NCCL group: the calls' pack on s, in the process group's
    // stream buffer (or one freed with the first fused op's scratch), and their ncclAllReduce
    // recorded in *recs (issued in the group with the bodies' calls).
    nm_status_t prepare(Op *const *ops, ProcessGroup &pg, CUstream s, std::vector<NcclRec> *recs);
    // After the group's end: every fused op's result into its receive bytes.
    nm_status_t unpack(ProcessGroup &pg, CUstream s);

  private:
    size_t part(int b) const;
    int n_ = 0, ncalls_ = 0, nfused_ = 0, first_ = -1;  // first_: the first fused op
    std::vector<int> bucket_;
    std::vector<size_t> offset_, total_;
    std::vector<int> type_, nop_;  // per call: NCCL type and op
    std::vector<size_t> es_;                // per call: the type's size
    std::vector<CUdeviceptr> buf_;  // per call: its part of the buffer
    std::vector<FuseSlot> slots_;
    std::vector<size_t> bytes_;  // per op: its dense bytes
    // (kept between launches: no allocation once warm)
    std::vector<nm_fuse_op_t> in_;
    std::vector<nm_copyv_region_t> regions_;
};

}  // namespace ncclmpi
#endif
