// ncclmpi: any buffer <-> dense bytes. `count` elements of `type` at p, in host or device memory,
// packed into (or unpacked from) dense bytes in pinned host memory, on the legacy default stream
// where the buffer is device memory (so after the application's work there). Used by the
// one-sided calls on device windows and by the collectives of ranks that share a GPU.
#ifndef NM_CORE_DTYPE_DENSE_H
#define NM_CORE_DTYPE_DENSE_H
#include <mpi.h>
#include <stddef.h>

#include "util/status.h"

namespace ncclmpi {

struct DtypeInfo;

struct Side {
    const void *p;
    long long count;
    MPI_Datatype type;
};

// The side's data (its span, count x type) is in device memory.
bool side_is_device(const Side &s, const DtypeInfo *d);
// s -> dense (pinned host memory of `bytes`, the signature's size). Device memory: the layout
// code's copies on the legacy stream, waited for unless wait = false (then the caller waits for
// the legacy stream); host memory: the layout code, or PMPI_Pack for types it cannot decode.
// NM_ERR_UNSUPPORTED: a device buffer's datatype the layout code cannot decode.
nm_status_t dense_pack(const Side &s, void *dense, size_t bytes, bool wait = true);
// dense -> s, the same way; only the typemap's bytes are written.
nm_status_t dense_unpack(const void *dense, size_t bytes, const Side &s, bool wait = true);
// Waits for the legacy default stream.
nm_status_t sync_legacy();

}  // namespace ncclmpi
#endif
