// ncclmpi: any buffer <-> dense bytes (dense.h).
#include "core/dtype/dense.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/memkind.h"
#include "core/dtype/dtype.h"
#include "core/dtype/layout.h"

namespace ncclmpi {
namespace {
constexpr size_t MAX_RUNS = 1 << 20;
}

nm_status_t sync_legacy() { return cu.cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS ? NM_OK : NM_ERR_CUDA; }

bool side_is_device(const Side &s, const DtypeInfo *d)
{
    if (s.count <= 0 || !d || d->size == 0) return false;
    MPI_Aint lo, hi;
    dtype_span(d, 0, s.count, &lo, &hi);
    int dev;
    return hi > lo && nm_mem_device((const char *)s.p + lo, &dev);
}

nm_status_t dense_pack(const Side &s, void *dense, size_t bytes, bool wait)
{
    const DtypeInfo *d = dtype_info(s.type);
    Layout l;
    if (side_is_device(s, d)) {
        if (!layout_build(s.type, s.count, MAX_RUNS, &l)) return NM_ERR_UNSUPPORTED;
        nm_status_t st = layout_pack_dev(l, (CUdeviceptr)s.p, (CUdeviceptr)dense, CU_STREAM_LEGACY);
        return st == NM_OK && wait ? sync_legacy() : st;
    }
    if (layout_build(s.type, s.count, MAX_RUNS, &l)) {
        layout_pack_host(l, s.p, dense);
        return NM_OK;
    }
    int pos = 0;
    return PMPI_Pack(s.p, (int)s.count, s.type, dense, (int)bytes, &pos, MPI_COMM_SELF) == MPI_SUCCESS ? NM_OK
                                                                                                   : NM_ERR_MPI;
}

nm_status_t dense_unpack(const void *dense, size_t bytes, const Side &s, bool wait)
{
    const DtypeInfo *d = dtype_info(s.type);
    Layout l;
    if (side_is_device(s, d)) {
        if (!layout_build(s.type, s.count, MAX_RUNS, &l)) return NM_ERR_UNSUPPORTED;
        nm_status_t st = layout_unpack_dev(l, (CUdeviceptr)dense, (CUdeviceptr)s.p, CU_STREAM_LEGACY);
        return st == NM_OK && wait ? sync_legacy() : st;
    }
    if (layout_build(s.type, s.count, MAX_RUNS, &l)) {
        layout_unpack_host(l, dense, const_cast<void *>(s.p));
        return NM_OK;
    }
    int pos = 0;
    return PMPI_Unpack(dense, (int)bytes, &pos, const_cast<void *>(s.p), (int)s.count, s.type, MPI_COMM_SELF) ==
                   MPI_SUCCESS
               ? NM_OK
               : NM_ERR_MPI;
}

}  // namespace ncclmpi
