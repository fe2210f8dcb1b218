// ncclmpi: which buffers of a call are significant on this rank, in which direction, and which
// bytes they span. Shared by classification, routing and staging.
#ifndef NM_CORE_BUFFERS_H
#define NM_CORE_BUFFERS_H
#include <mpi.h>

#include "core/dtype/dtype.h"
#include "route/nm_op.h"
#include "route/route.h"

namespace ncclmpi {

struct CommState;

enum BufDir { BUF_IN = 1, BUF_OUT = 2, BUF_INOUT = 3 };

struct BufRef {
    bool is_recv;       // the descriptor field it came from: rbuf (true) or sbuf (false)
    void *ptr;          // as the caller passed it
    int dir;            // BufDir
    MPI_Aint lo, hi;    // byte span relative to ptr
    bool dense;         // whole span is written by the call (no copy-in needed for BUF_OUT)
    nm_memkind_t kind;  // filled by classification
    int device;
};

// Rooted collectives: is this rank the root (intercomm: MPI_ROOT)?
bool is_root_side(const nm_op_t *o, const CommState *cs);
// Datatype arguments significant on this rank (the others may be garbage or MPI_DATATYPE_NULL).
bool stype_used(const nm_op_t *o, const CommState *cs);
bool rtype_used(const nm_op_t *o, const CommState *cs);

// Up to two buffers. Returns their number, or -1 when an argument is invalid (the caller then
// leaves the call to the real MPI, which reports it with the standard error class).
int op_buffers(const nm_op_t *o, const CommState *cs, BufRef out[2]);

}  // namespace ncclmpi
#endif
