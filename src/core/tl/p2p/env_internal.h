// ncclmpi: what the files of point-to-point envelopes share (envelope.cc and env_*.cc).
//
// envelope.cc: MPI_Init's decision, the limits, the payloads held for their receivers and the
// release messages that free them; env_pool.cc: the device payload pools, their copy events and
// pulls of payloads; env_send.cc: sending (the send queue, batched copies); env_recv.cc: what a
// receive decodes; env_probe.cc: the probe queue, probes, the receive gate.
#ifndef NM_CORE_P2P_ENV_INTERNAL_H
#define NM_CORE_P2P_ENV_INTERNAL_H
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/cuda_api.h"
#include "core/tl/p2p/envelope.h"

namespace ncclmpi {
struct Device;
namespace env {

// ---- envelope.cc --------------------------------------------------------------------------------
extern bool device_mode;  // device sends go as envelopes (else host ones: the test mode)
extern uint64_t nonce[2];
extern int my_wrank;

struct Held {
    char *payload;  // host payload (NM_ENV_HOST)
    char *wire;
    int pool = -1;  // NM_ENV_IPC: the device pool (ordinal) and the block in it
    size_t off = 0, len = 0;
    int slot = -1;  // NM_ENV_IPC: the copy event its envelope names (a reference to it)
};
extern std::mutex mu;
extern std::unordered_map<uint32_t, Held> held;  // payloads waiting for their receivers
void count_inflight();  // (under mu)
extern unsigned long long sent_count;  // envelopes sent (under mu)
void held_free(const Held &h);  // frees its buffers (a pool block goes back, its slot reference too)
// Payload id of world rank wrank released to its sender (held back while env_releases_hold is on).
void release(int wrank, uint32_t id);

// ---- env_pool.cc --------------------------------------------------------------------------------
// A device pool per GPU of this process: cuMemAlloc'ed (so it can be exported), blocks handed out
// first-fit and returned when their receivers release them. Its first POOL_HEAD bytes hold the
// CUDA IPC handles of its copy events (slots): a payload's envelope goes out as soon as its copy
// into the pool is queued, naming the slot recorded after that copy, and the receiver's pull waits
// for it on the GPU (design.md, "Point-to-point envelopes"). A slot is recorded once per use and
// reused only when nothing refers to it any more: neither an envelope whose payload is not released
// (its receiver may not have queued its wait yet) nor a send whose request waits for the copy. A
// receiver therefore never waits for a later record than the one its envelope named, which could
// stand behind work of the sender's that waits for the receiver.
enum { NM_ENV_SLOTS = 64, POOL_HEAD = NM_ENV_SLOTS * (int)sizeof(CUipcEventHandle) };
struct Pool {
    CUdeviceptr base = 0;
    size_t size = 0;
    CUipcMemHandle handle;
    std::map<size_t, size_t> free_;  // offset -> length
    bool failed = false;
    CUevent slot_ev[NM_ENV_SLOTS] = {};  // interprocess events (none: every flush waits for its copies)
    int slot_refs[NM_ENV_SLOTS] = {};
    std::atomic<bool> slot_done[NM_ENV_SLOTS] = {};  // the copy it was recorded after is done
    std::atomic<uint64_t> slot_notready[NM_ENV_SLOTS] = {};  // the progress sweep that last found it not done
    std::vector<int> slot_free;
};
extern Pool pools[64];

long pool_alloc(int dev, size_t bytes);  // an offset in device dev's pool, or -1
void pool_free(int dev, size_t off, size_t bytes);
void slot_ref(int dev, int s, int n);
void slot_unref(int dev, int s);

// The event to record after a payload's copy on device d: a copy event of d's pool (slot >= 0, one
// reference held) when one is free, else, with `plain`, one of the device's plain events (the
// envelope then waits for the copy on the host), else none.
struct CopyMark {
    CUevent ev = nullptr;
    int slot = -1;
};
CopyMark mark_get(Device *d, bool plain);
void mark_put(Device *d, const CopyMark &m);

// Pull n bytes of e's payload into dst (host or device memory). false when it cannot (another
// node, ptrace restrictions, no peer access).
bool pull(void *dst, const Envelope &e, size_t n, CUstream stream = nullptr, bool to_host = false);

// ---- env_recv.cc --------------------------------------------------------------------------------
// The envelope in `wire`, if it is one of this job's.
bool decode(const char *wire, Envelope *e);
int pull_payload(const Envelope &e, char *span, size_t cap, bool contiguous, void *buf, int count, MPI_Datatype type,
                 MPI_Comm comm, size_t *n, bool to_host, CUstream stream = nullptr, EnvRelease *later = nullptr);

// The bytes a status counts. Open MPI keeps them in the status itself (its public struct, the same
// since 1.x): read there, as the real MPI_Get_elements_x would, without a call (every receive on
// a communicator that may carry envelopes asks); elsewhere, through the real MPI.
inline MPI_Count status_bytes(const MPI_Status *st)
{
#if defined(OPEN_MPI) && OPEN_MPI
    return (MPI_Count)st->_ucount;
#else
    MPI_Count n = MPI_UNDEFINED;
    return PMPI_Get_elements_x(st, MPI_BYTE, &n) == MPI_SUCCESS ? n : MPI_UNDEFINED;
#endif
}

// ---- env_probe.cc -------------------------------------------------------------------------------
extern MPI_Comm self_comm;  // fabricated message handles come from here (made at env_init)

}  // namespace env
}  // namespace ncclmpi
#endif
