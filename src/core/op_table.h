// ncclmpi: the op table. One row per operation kind (src/route/nm_op.h lists them): the buffers
// the kind makes significant on a rank and the NCCL body that runs it. Built from the same
// X-macro as the kind enum, so a kind without its row, or an NCCL-capable kind without a body,
// does not compile (src/core/op_table.cc).
#ifndef NM_CORE_OP_TABLE_H
#define NM_CORE_OP_TABLE_H
#include <mpi.h>

#include "core/dtype/buffers.h"
#include "core/dtype/dtype.h"
#include "route/nm_op.h"
#include "util/status.h"

namespace ncclmpi {

struct CommState;
class NcclCall;

// What dispatch derives once per call and every later step reads.
struct OpCtx {
    const nm_op_t *o = nullptr;
    const CommState *cs = nullptr;
    int rank = 0, size = 1;  // in the (local group of the) communicator
    int n = 1;               // ranks data comes from / goes to (remote size for intercommunicators)
    int nin = 0, nout = 0;   // neighbourhood collectives: the topology's in- and out-degree
    bool inter = false;
    bool root = false, leaf = false;  // rooted kinds: root, or a rank that sends to / receives from it
    bool inplace = false;             // MPI_IN_PLACE as the send buffer
    const DtypeInfo *sd = nullptr, *rd = nullptr;  // datatypes significant on this rank
};

// Fills c for o on communicator cs. false when an argument makes the call invalid (a root out
// of range): the real MPI then reports it with the standard error class.
bool op_ctx_init(const nm_op_t *o, const CommState *cs, OpCtx *c);

using BuffersFn = int (*)(const OpCtx &, BufRef out[2]);
using NcclFn = nm_status_t (*)(NcclCall &);

struct OpRow {
    const char *name;
    unsigned facts;     // NM_KF_*
    BuffersFn buffers;  // significant buffers: their number, or -1 for an invalid argument
    NcclFn nccl;        // nullptr for kinds NCCL cannot run
};

const OpRow &op_row(int kind);

}  // namespace ncclmpi
#endif
