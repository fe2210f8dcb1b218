// ncclmpi: NVTX ranges (NCCLMPI_NVTX=1) around routed device calls and NCCL launches, for Nsight
// Systems; NCCLMPI_NVTX=2 ranges each stage of a device call's host work instead, under fixed
// names (NvtxStage), which bench/stage_profile sums per stage. NVTX3 is header-only and does
// nothing until a profiler injects itself.
#ifndef NM_CORE_NVTX_H
#define NM_CORE_NVTX_H
#include <nvtx3/nvToolsExt.h>

#include "util/config.h"

namespace ncclmpi {

// One NVTX range from its construction to end() or the end of its scope, pushed only when `on`.
class NvtxScope {
  public:
    NvtxScope(const char *name, bool on) : on_(on)
    {
        if (on_) nvtxRangePushA(name);
    }
    void end()
    {
        if (on_) nvtxRangePop();
        on_ = false;
    }
    ~NvtxScope() { end(); }
    NvtxScope(const NvtxScope &) = delete;
    NvtxScope &operator=(const NvtxScope &) = delete;

  private:
    bool on_;
};

// A routed call or an NCCL launch (NCCLMPI_NVTX=1).
class NvtxRange : public NvtxScope {
  public:
    explicit NvtxRange(const char *name) : NvtxScope(name, nm_cfg.NVTX == 1) {}
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

// A stage of a device call's host work (NCCLMPI_NVTX=2).
class NvtxStage : public NvtxScope {
  public:
    explicit NvtxStage(const char *name) : NvtxScope(name, __builtin_expect(nm_cfg.NVTX >= 2, 0)) {}
};

}  // namespace ncclmpi
#endif
