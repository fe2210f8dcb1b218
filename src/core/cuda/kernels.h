// ncclmpi: the library's kernels (one fatbin built by nvcc at build time and embedded: fatbin.cu),
// loaded with the driver API once per context, so the library links no CUDA runtime. Without nvcc
// (configure --without-kernels) the image is empty and every caller takes its other path.
#ifndef NM_CORE_CUDA_KERNELS_H
#define NM_CORE_CUDA_KERNELS_H
#include <cuda.h>

#include <string>

#include "core/cuda/copyv_abi.h"
#include "core/tl/oneshot/oneshot_abi.h"

namespace ncclmpi {

// Indices into kernels()'s table: the one-shot reductions by element kind (NM_OS_I8...), then
// the move and copy kernels, then the shared-GPU reductions (NM_K_SH + element kind):
enum { NM_K_MOVE = NM_OS_NTYPES, NM_K_COPYV, NM_K_SH, NM_K_COUNT = NM_K_SH + NM_OS_NTYPES };

// Kernels built into this library.
bool kernels_built();
// The kernels' functions in context ctx (loaded at the first call), or null with *why.
const CUfunction *kernels(CUcontext ctx, std::string *why);

// Whether the copy kernel takes a copy of n bytes from src to dst into a batch (kernels built,
// both ends 16-byte aligned, at most `limit` bytes: env_limits().copy_batch, from
// NCCLMPI_P2P_COPY_BATCH); others go as driver copies.
bool copyv_batchable(const void *dst, const void *src, size_t n, size_t limit);

// n copies on stream s in the current context, which is ctx: nm_copyv launches of up to
// NM_COPYV_MAX regions each (a region left alone, one not on 16-byte boundaries, no kernels, or a
// launch refused: driver copies). The first driver error is returned; copies issued before it
// stay queued.
CUresult copy_regions(CUcontext ctx, const nm_copyv_region_t *r, size_t n, CUstream s);

}  // namespace ncclmpi
#endif
