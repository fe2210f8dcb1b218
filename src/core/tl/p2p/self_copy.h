// ncclmpi: a blocking MPI_Sendrecv from a rank to itself on device memory, as one device copy
// (route.h, nm_p2p_self_copy, says where it applies and why its receive can only take its own
// send). Without it such a call went through the staged path or an envelope: a copy into the
// pool or to the host, a message to itself through the real MPI, a copy out, and the release.
// MPI_Sendrecv_replace to itself is then no copy at all: its buffer holds what it receives.
#ifndef NM_CORE_P2P_SELF_COPY_H
#define NM_CORE_P2P_SELF_COPY_H
#include "core/dtype/buffers.h"
#include "core/op_table.h"
#include "util/status.h"

namespace ncclmpi {

// o: the call, x its context, b its nb buffers as classified (the send's, then the receive's).
// true when it ran as the copy: *st then says how the copy went (NM_OK: the data is in the
// receive buffer and the status is set); false: the call takes its usual path (nothing done).
bool p2p_self_sendrecv(nm_op_t *o, const OpCtx &x, const BufRef *b, int nb, nm_status_t *st);

// Whether call o sends to the rank itself (a send, or a Sendrecv's send part)
static inline bool p2p_sends_to_self(const nm_op_t *o, const OpCtx &x)
{
    return !x.inter && (nm_opk(o->kind) & NM_KF_P2P) && o->kind != NM_OPK_RECV && o->kind != NM_OPK_MRECV &&
           o->peer == x.rank;
}
// Such a send goes to the real MPI: noted on its communicator for good (a message to itself may
// be pending there: route.h, nm_self_in_t's self_sent)
void p2p_note_self_send(const nm_op_t *o, const OpCtx &x);

}  // namespace ncclmpi
#endif
