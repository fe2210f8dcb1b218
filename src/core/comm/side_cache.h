// ncclmpi: the device sides of freed communicators (an NCCL process group, or a shared-GPU
// window), kept for a later communicator of the same processes in the same order, which takes one
// over instead of making its own (tens of milliseconds for an NCCL communicator, milliseconds
// for a window). NCCLMPI_COMM_CACHE sides at most, per process.
//
// Taking a side over is a decision of every rank of the new communicator together: each rank
// offers the ids of the sides it keeps for these processes on its device (side_offer), inside
// the creation's one PMPI_Allgather, and every rank takes the smallest id that every rank offered
// (side_common), or none; so all take the same one or all make a new one. An id names one agreed
// creation (its rank 0's world rank and count), so the sides with that id on the ranks are one
// NCCL communicator, or one set of mapped windows, of exactly these processes in this order.
// doc/design.md, "A communicator's NCCL side: lifecycle".
#ifndef NM_CORE_SIDE_CACHE_H
#define NM_CORE_SIDE_CACHE_H
#include <stdint.h>

#include <memory>
#include <vector>

namespace ncclmpi {

class ProcessGroup;
struct CommState;
struct SharedWin;

enum { NM_SIDE_OFFER = 4 };  // ids a rank offers at most (the cache may hold more)

// An id's low bit: the kind of side
enum { NM_SIDE_NCCL = 0, NM_SIDE_SHARED = 1 };

// What one rank puts into the creation's table: a fresh id (rank 0's names a side made now) and
// the ids of the sides it keeps for cs's processes (in cs's order) on `device`, ascending,
// 0-padded. The offered sides leave the cache until side_settle, so that another thread's park
// cannot evict one that the other ranks are about to take.
struct SideOffer {
    uint64_t fresh;
    uint64_t ids[NM_SIDE_OFFER];
};
struct SideHeld;  // the offered sides, held by the creation until side_settle
SideHeld *side_offer(CommState *cs, int device, SideOffer *mine);
// The smallest id of `kind` that each of the n offers holds, or 0 (the same on every rank: it
// reads the table only).
uint64_t side_common(const SideOffer *offers, int n, int kind);
// After the decision: moves the held side `id` into cs (cs->pg or cs->shared) and returns true
// (false when id is 0 or not held), and gives the other offered sides back to the cache.
bool side_settle(CommState *cs, SideHeld *held, uint64_t id);

// The last reference to cs is gone: keep its side (a healthy NCCL group or a window) for a later
// communicator, evicting the oldest kept one beyond NCCLMPI_COMM_CACHE, or destroy it.
void side_park(CommState *cs);
// A side evicted or not kept is destroyed only while no NCCL operation of this process is in
// flight (engine_inflight), at a progress point; side_graves_reap does it (finalize: whatever
// is in flight, after MPI_Finalize's drain), in an order every rank shares (by agreed id).
void side_graves_reap(bool finalize = false);
// MPI_Finalize: destroy every kept side (and those waiting for their destruction), by agreed
// id; later parks destroy at the next reap.
void side_cache_teardown();

}  // namespace ncclmpi
#endif
