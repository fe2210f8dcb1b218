// ncclmpi: persistent requests on device buffers.
//
// A persistent collective (MPI-4 MPI_<coll>_init, the kinds of route.h's nm_pers_coll_restarts)
// is a restarted call below: each MPI_Start runs the nonblocking collective (MPI_Iallreduce for
// MPI_Allreduce_init) on its own route, wherever envelopes are.
//
// On a communicator that may carry envelopes (envelope.h), MPI_Send_init, MPI_Ssend_init,
// MPI_Rsend_init and MPI_Recv_init on device buffers are restarted nonblocking calls: each
// MPI_Start runs the call's nonblocking form (MPI_Isend, MPI_Issend, MPI_Irsend, MPI_Irecv) as the
// application's own would run (a large message as an envelope whose payload the receiver copies
// from the sender's GPU, small ones through the send queue), which is what the standard says a
// start is. The application's request is a persistent receive of no bytes on ncclmpi's private
// communicator, started by the real MPI with the others of the MPI_Start, and completed when that
// nonblocking call completed (a forward of no bytes to itself); its status is the call's (source,
// tag, count, error, cancelled).
//
// Elsewhere (envelopes off, MPI_Bsend_init), MPI_Send_init / MPI_Recv_init (and the Ssend, Bsend,
// Rsend forms) on device buffers make the real MPI's persistent request on pinned host shadows of
// the buffers; the application holds that request. Each MPI_Start copies a send's data to its shadow (after the application's work on the
// legacy stream) before the real MPI starts; the Wait or Test that completes a receive copies the
// bytes it got back to the device before it returns. A request freed while active completes in
// the background (its copy back runs at a later ncclmpi call, at the latest at MPI_Finalize).
// The messages are the real MPI's, unchanged: either side may use host or device memory.
//
// The same table holds the real MPI's requests of nonblocking host receives on a communicator
// that may carry envelopes (envelope.h): the application holds the real MPI's request, and the
// Wait or Test that completes it decodes what it got (MPI_Request_get_status, when it finds it
// complete; a request freed while active, at a later ncclmpi call). Not under
// MPI_THREAD_MULTIPLE (task.h, Task::set_decode).
#ifndef NM_CORE_PERSISTENT_H
#define NM_CORE_PERSISTENT_H
#include <mpi.h>

#include "route/nm_op.h"

namespace ncclmpi {

struct Stage;
struct Decode;

// What a kind of staged persistent request does beyond the plain one's copies (partitioned.cc:
// the partitions of MPI_Psend_init / MPI_Precv_init), called with no lock held.
struct PersExt {
    virtual ~PersExt() = default;
    // MPI_Start, before the real MPI starts it: false when the start copies nothing in (the
    // extension copies at its own calls)
    virtual bool start(Stage *s) = 0;
    // Its completion (a Wait, a Test, MPI_Request_get_status, or in the background once freed
    // while active): the copy back instead of the whole buffer's. An MPI code (reported through
    // comm's handler).
    virtual int complete(Stage *s, MPI_Comm comm) = 0;
};

// The real MPI made persistent request `req` on the shadows of `s` (which it now owns, and ext
// when given), on communicator comm (whose error handler reports a failed copy).
void pers_register(MPI_Request req, Stage *s, MPI_Comm comm, PersExt *ext = nullptr);
// The extension of request req and its stage (null when req has none); *active: started, not
// completed yet. Valid while the application holds req.
PersExt *pers_ext(MPI_Request req, Stage **s, bool *active);
// Whether one of reqs[0..n) is a staged persistent request.
bool pers_owns(int n, const MPI_Request *reqs);
// Before the real MPI starts them: the copies in of the staged ones among reqs[0..n); *restarts:
// whether one of them is a restarted call (pers_restart_post after the real MPI started them).
// MPI_SUCCESS or an MPI error code (nothing started).
int pers_start(int n, const MPI_Request *reqs, bool *restarts);
// Whether persistent call o (on device buffers) is a restarted nonblocking call (see above).
bool pers_restart_applies(const nm_op_t *o);
// Make o's request for it. An MPI code (a bad argument: the real MPI's handler reported it).
int pers_restart_init(nm_op_t *o);
// After the real MPI started reqs[0..n): the restarted calls among them run their nonblocking
// form. Each request runs or fails alone (a failed one completes with its error). MPI_SUCCESS or
// the first error (reported through its communicator's handler).
int pers_restart_post(int n, const MPI_Request *reqs);
// A nonblocking host receive that may get an envelope, with request req (the real MPI's) and
// decoding state d (owned) on comm (whose error handler reports a failed decode).
void pers_watch_decode(MPI_Request req, Decode *d, MPI_Comm comm);
// After a Wait or Test form returned, for request `req` (the handle it had) that the form may have
// completed: st its status (null when it failed), gone whether the application's handle is
// MPI_REQUEST_NULL now. A staged receive's copy back (none when cancelled or failed), a host
// receive's decoding. MPI_SUCCESS or an MPI error code.
int pers_completed(MPI_Request req, MPI_Status *st, bool gone);
// A persistent receive on a communicator that may carry envelopes (o: Recv_init; s: its staged
// shadows or null for host memory; target: where the data goes). Makes o's request. MPI code.
int pers_recv_init_envelope(nm_op_t *o, Stage *s, void *target);
// MPI_Cancel of an emulated persistent receive: 1 (and *rc) when it was one.
int pers_cancel(MPI_Request req, int *rc);
// MPI_Request_free of a request in the table: 1 (and *rc) when it was one.
int pers_free(MPI_Request *req, int *rc);
// Requests freed while active: the completed ones copied back and released.
void pers_progress();
// MPI_Finalize: wait for them.
void pers_drain();

}  // namespace ncclmpi
#endif
