// ncclmpi: the CUDA driver API, resolved at run time from libcuda.so.1. Nothing links against
// CUDA, so the library loads on machines without a GPU or driver.
#ifndef NM_CORE_CUDA_API_H
#define NM_CORE_CUDA_API_H
#include <cuda.h>
#include "util/status.h"

// Names go through cuda.h's macros (cuMemAlloc -> cuMemAlloc_v2), so dlsym finds the entry
// point whose ABI matches the header.
#define NM_CU_FUNCTIONS(X)                                                                    \
    X(cuInit) X(cuGetErrorString) X(cuGetErrorName) X(cuPointerGetAttributes)                  \
    X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuDevicePrimaryCtxRetain)        \
    X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetUuid) X(cuDeviceGetPCIBusId)               \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent)           \
    X(cuStreamQuery) X(cuStreamGetCtx) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)       \
    X(cuEventSynchronize) X(cuMemcpyAsync) X(cuMemcpy) X(cuMemHostRegister)                   \
    X(cuMemHostUnregister) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemAlloc) X(cuMemFree)       \
    X(cuMemsetD8Async) X(cuMemcpy2DAsync)                                                     \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemHostAlloc) X(cuMemHostGetDevicePointer)        \
    X(cuDeviceGetAttribute) X(cuStreamWriteValue64)                                            \
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuIpcGetMemHandle)          \
    X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) X(cuMemGetAddressRange) X(cuIpcGetEventHandle)   \
    X(cuIpcOpenEventHandle)

namespace ncclmpi {

struct CudaApi {
    void *handle = nullptr;
#define NM_CU_MEMBER(f) decltype(&::f) f = nullptr;
    NM_CU_FUNCTIONS(NM_CU_MEMBER)
#undef NM_CU_MEMBER
    decltype(&::cuCtxGetId) cuCtxGetId = nullptr;  // (CUDA 12.0 drivers and later; null before)
};

extern CudaApi cu;

// Resolve the driver API from the copy of libcuda already in the process (never loads it
// itself). Returns true when every entry point was found.
bool cuda_attach();
bool cuda_attached();
// Load the driver into a process that has not (a receive that must read another process's GPU
// memory), then attach and initialise it. false when it cannot (logged).
bool cuda_load();
const char *cuda_errstr(CUresult r);

// A device reset (cudaDeviceReset, cuDevicePrimaryCtxReset) destroys what ncclmpi made in the
// device's primary context: a driver call that names one of its streams then crashes inside the
// driver, and its pinned memory is unmapped. ncclmpi notes the primary context's id
// (cuCtxGetId, 16 ns) of each device the first time it works on it; the id differs after a reset,
// also once the application has used the device again. cuda_ctx_current: false when dev's (or,
// with dev < 0, any noted device's) context is not the one noted; from then on ncclmpi leaves
// what it held there and takes no device buffers (sticky, logged once). Without cuCtxGetId
// (drivers before CUDA 12.0) a reset is not seen.
bool cuda_ctx_current(int dev = -1);
// what a call with device buffers says after one
constexpr const char *nm_reset_why =
    "the CUDA context of the device was reset (cudaDeviceReset) after ncclmpi used it: device buffers cannot go "
    "through ncclmpi after a reset";

}  // namespace ncclmpi

// Check a driver call; on failure log call, file:line and the decoded error, then `action`.
#define NM_CU_CHECK(call, action)                                                             \
    do {                                                                                      \
        CUresult nm_cu_rc_ = (call);                                                          \
        if (nm_cu_rc_ != CUDA_SUCCESS) {                                                      \
            NM_ERROR(INIT, "%s failed: %s", #call, ::ncclmpi::cuda_errstr(nm_cu_rc_));        \
            action;                                                                           \
        }                                                                                     \
    } while (0)

#endif
