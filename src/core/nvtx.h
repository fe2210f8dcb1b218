// ncclmpi: NVTX ranges (NCCLMPI_NVTX=1) around routed device calls and NCCL launches, for Nsight
// Systems; NCCLMPI_NVTX=2 ranges each stage of a device call's host work instead, under fixed
// names (NvtxStage), which bench/stage_profile sums per stage. NVTX3 is header-only and does
// nothing until a profiler injects itself.
#ifndef NM_CORE_NVTX_H
#define NM_CORE_NVTX_H
#include <nvtx3/nvToolsExt.h>

#include "util/config.h"

namespace ncclmpi {

class NvtxRange {
  public:
    explicit NvtxRange(const char *name) : on_(nm_cfg.NVTX == 1)
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

// The stages of a device call's host work (NCCLMPI_NVTX=2), named by these constants only (a
// profiler may tell them apart by address).
namespace stage {
constexpr const char kClassify[] = "nm:classify";  // state, buffers' memory kinds, the route
constexpr const char kRouted[] = "nm:routed";      // the routed call once classified (the rest nests)
constexpr const char kQueue[] = "nm:queue";        // the operation made and queued or run
constexpr const char kRequest[] = "nm:request";    // its task and MPI request
constexpr const char kOrder[] = "nm:order";        // ordering after the application's streams
constexpr const char kLaunch[] = "nm:launch";      // an NCCL group (or one-shot kernels) issued
constexpr const char kMark[] = "nm:mark";          // a launch's completion event or flag
constexpr const char kFlush[] = "nm:flush";        // a wait's flush of what is queued
constexpr const char kWait[] = "nm:wait";          // a wait's loop until its requests complete
}  // namespace stage

class NvtxStage {
  public:
    explicit NvtxStage(const char *name) : on_(__builtin_expect(nm_cfg.NVTX >= 2, 0))
    {
        if (on_) nvtxRangePushA(name);
    }
    void end()
    {
        if (on_) nvtxRangePop();
        on_ = false;
    }
    ~NvtxStage() { end(); }
    NvtxStage(const NvtxStage &) = delete;
    NvtxStage &operator=(const NvtxStage &) = delete;

  private:
    bool on_;
};

}  // namespace ncclmpi
#endif
