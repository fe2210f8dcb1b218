// ncclmpi: which buffers of a call are significant on this rank, in which direction, and which
// bytes they span (MPI-3.1 chapters 3 and 5). Shared by classification, routing and staging.
#ifndef NM_CORE_BUFFERS_H
#define NM_CORE_BUFFERS_H
#include <mpi.h>

#include "core/dtype/dtype.h"
#include "route/nm_op.h"
#include "route/route.h"

namespace ncclmpi {

enum BufDir { BUF_IN = 1, BUF_OUT = 2, BUF_INOUT = 3 };

struct BufRef {
    bool is_recv;       // the descriptor field it came from: rbuf (true) or sbuf (false)
    void *ptr;          // as the caller passed it (MPI_BOTTOM included)
    int dir;            // BufDir
    MPI_Aint lo, hi;    // byte span relative to ptr; ptr + lo is the first byte the call touches
    bool dense;         // whole span is written by the call (no copy-in needed for BUF_OUT)
    nm_memkind_t kind;  // filled by classification
    int device;
    bool counted = false;  // BUF_OUT, dense: the call writes it from its start, as many bytes as its
                           // status counts (a read into a contiguous buffer): only those come back
    bool empty() const { return hi <= lo; }
    const void *first() const { return (const char *)ptr + lo; }
};

}  // namespace ncclmpi
#endif
