// ncclmpi: the byte layout of `count` elements of an MPI datatype as strided runs, and the copies
// that pack such a buffer into a dense one (and back) on the host or on the GPU. NCCL moves dense
// bytes only: a rank whose datatype is non-contiguous packs into a dense scratch buffer before
// NCCL runs and unpacks after.
#ifndef NM_CORE_LAYOUT_H
#define NM_CORE_LAYOUT_H
#include <cuda.h>
#include <mpi.h>
#include <stddef.h>

#include <vector>

#include "util/status.h"

namespace ncclmpi {

// `count` blocks of `len` bytes; block i starts at byte offset off + i*stride from the buffer
// pointer. stride may be negative, zero or smaller than len (overlapping typemaps); it is 0 when
// count == 1. len > 0 and count > 0 in every run of a built Layout.
struct LayoutRun {
    MPI_Aint off;
    size_t len;
    size_t count;
    MPI_Aint stride;
};

// Runs in pack order (the dense buffer is their blocks back to back); bytes = the payload
// (count * MPI_Type_size), which is also the dense buffer's size.
struct Layout {
    std::vector<LayoutRun> runs;
    size_t bytes = 0;
};

// The typemap of `count` elements of `dt` (element k at k * extent) as strided runs, in the order
// MPI_Pack reads them. Adjacent blocks merge; consecutive equal-length blocks at a constant stride
// (also across elements, e.g. one block per element at the extent) become one run.
// Decodes NAMED, DUP, CONTIGUOUS, VECTOR, HVECTOR, INDEXED, HINDEXED, INDEXED_BLOCK,
// HINDEXED_BLOCK, STRUCT, RESIZED, SUBARRAY and DARRAY, nested up to 32 deep.
// Returns false (and an empty *out) when the type cannot be decoded (F90 parameterized types,
// unknown combiners, MPI_DATATYPE_NULL, a negative count), when the MPI lays it out otherwise
// than the standard says (each level's runs must span the true extent the MPI reports; struct
// members of size 0 are refused: Open MPI 4.1 gets both wrong), when it needs more than
// `max_runs` runs, or when decoding would take unreasonably long; the caller then packs on the
// host with PMPI_Pack. count == 0 or a zero-size type: true with no runs. Calls PMPI_* only;
// thread-safe; allocates O(nesting depth) vectors.
bool layout_build(MPI_Datatype dt, long long count, size_t max_runs, Layout *out);

// Host copies: dense[0, l.bytes) <-> the typemap at base. Unpack writes in typemap order and
// touches no byte outside the typemap.
void layout_pack_host(const Layout &l, const void *base, void *dense);
void layout_unpack_host(const Layout &l, const void *dense, void *base);

// The same copies queued on stream `s` with the CUDA driver API (cu.* from core/cuda/cuda_api.h,
// resolved at run time; the caller has attached it and made the right context current). A run of
// count > 1 with len <= stride <= 2^31-1 is one cuMemcpy2DAsync (WidthInBytes = len, Height =
// count, the dense side's pitch = len); a single block is one cuMemcpyAsync; runs whose stride is
// negative or smaller than len are copied block by block, in order. Pointers are unified virtual
// addresses (device or managed memory). Returns NM_OK or NM_ERR_CUDA (logged).
nm_status_t layout_pack_dev(const Layout &l, CUdeviceptr base, CUdeviceptr dense, CUstream s);
nm_status_t layout_unpack_dev(const Layout &l, CUdeviceptr dense, CUdeviceptr base, CUstream s);

}  // namespace ncclmpi
#endif
