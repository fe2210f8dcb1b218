// ncclmpi: NVTX ranges (NCCLMPI_NVTX=1) around routed device calls and NCCL launches, for Nsight
// Systems. NVTX3 is header-only and does nothing until a profiler injects itself.
#ifndef NM_CORE_NVTX_H
#define NM_CORE_NVTX_H
#include <nvtx3/nvToolsExt.h>

#include "util/config.h"

namespace ncclmpi {

class NvtxRange {
  public:
    explicit NvtxRange(const char *name) : on_(nm_cfg.NVTX != 0)
    {
        if (on_) nvtxRangePushA(name);
    }
    ~NvtxRange()
    {
        if (on_) nvtxRangePop();
    }
    NvtxRange(const NvtxRange &) = delete;
    NvtxRange &operator=(const NvtxRange &) = delete;

  private:
    bool on_;
};

}  // namespace ncclmpi
#endif
