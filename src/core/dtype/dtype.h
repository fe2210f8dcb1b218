// ncclmpi: what the core needs to know about an MPI datatype, computed once per type.
#ifndef NM_CORE_DTYPE_H
#define NM_CORE_DTYPE_H
#include <mpi.h>
#include <stddef.h>

namespace ncclmpi {

struct DtypeInfo {
    int nccl_type;        // NCCL type of `basic` for reductions, or NM_UNSUPPORTED
    MPI_Datatype basic;   // the one predefined type the signature is made of, or MPI_DATATYPE_NULL
    size_t basic_size;    // its size (0 when heterogeneous)
    size_t size;          // bytes of data in one element
    MPI_Aint lb, extent;  // MPI lower bound and extent
    MPI_Aint true_lb, true_extent;
    bool contig;          // any count of it is one in-order run of count*size bytes at true_lb
    int os_kind;          // element kind of the one-shot kernels for `basic` (NM_OS_*), or -1
    unsigned os_ops;      // the ops MPI defines on it that they run (a bit per NM_OS_* op)
};

// Cached per datatype (an attribute on derived types, so a freed handle never answers stale).
// Returns nullptr for MPI_DATATYPE_NULL or an invalid handle.
const DtypeInfo *dtype_info(MPI_Datatype dt);
const DtypeInfo *dtype_info_lookup(MPI_Datatype dt);  // uncached

// Byte span [lo, hi) touched by `count` elements of `d` placed at byte offset `disp`.
void dtype_span(const DtypeInfo *d, MPI_Aint disp, long long count, MPI_Aint *lo, MPI_Aint *hi);

}  // namespace ncclmpi
#endif
