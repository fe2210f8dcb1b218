// ncclmpi: neighbourhood collectives as point-to-point (MPI_Neighbor_allgather(v),
// MPI_Neighbor_alltoall(v/w) and their MPI_Ineighbor_ forms).
//
// Where device envelopes are on (env_device(): decided at MPI_Init over MPI_COMM_WORLD, the same on
// every rank), every rank runs these calls as one nonblocking receive from each source and one
// nonblocking send to each destination of the topology, each run as the application's own
// MPI_Irecv/MPI_Isend would be (envelopes for large device blocks, the send queue for small ones,
// the real MPI for host ones), on a duplicate of the communicator made by the constructor that
// gave it its topology. Host and device ranks alike: the decision reads nothing of this rank's
// buffers, so every rank's messages meet the matching receives of the others. Everywhere else the
// neighbourhood collectives are the real MPI's (device buffers staged around it).
//
// Matching on the duplicate: a Cartesian block toward direction -1 of dimension d goes with tag
// 2d and one toward +1 with 2d + 1, received from the opposite direction with the other tag (a
// dimension of one or two processes names the same neighbour twice); graph blocks go with one tag,
// paired by their order in the neighbour lists (repeated edges included). Successive calls on one
// communicator match in call order (the real MPI's non-overtaking order).
#ifndef NM_CORE_P2P_NEIGHBOR_H
#define NM_CORE_P2P_NEIGHBOR_H
#include <mpi.h>

#include "route/nm_op.h"

namespace ncclmpi {

struct CommState;
// The neighbours of a communicator with a topology, in the order of its blocks, and the tags.
struct Neighbors;

// A constructor made comm (every rank of it is in the constructor): where neighbourhood
// collectives run as point-to-point and comm has a topology, its duplicate and neighbour lists.
void neigh_comm_created(MPI_Comm comm);
// Release cs's (the communicator is being freed: every rank of it is here).
void neigh_comm_freed(CommState *cs);
// Whether comm's neighbourhood collectives run as point-to-point.
bool neigh_applies(MPI_Comm comm);
// The number of blocks comm's neighbourhood collectives receive (*in) and send (*out) on this
// rank: its topology's in- and out-degree (a Cartesian one: 2 per dimension); 0 without one.
void neigh_degrees(MPI_Comm comm, int *in, int *out);
// Run it: MPI_SUCCESS, or an MPI error code raised through o->comm's handler. Called at depth 0
// (its messages are run as the application's own calls).
int neigh_run(nm_op_t *o);

}  // namespace ncclmpi
#endif
