// ncclmpi: point-to-point envelopes (NCCLMPI_P2P_ENVELOPE: auto, the default, device, host, off).
//
// A large message can travel as a small envelope through the real MPI (the user's communicator,
// destination and tag, so matching, wildcards and the non-overtaking order stay the real MPI's)
// while its payload waits in the sender's memory, from where the receiver pulls it once the
// envelope matched a receive: device payloads from the sender's CUDA IPC pool with a peer copy
// (NCCLMPI_P2P_ENVELOPE=device), host ones with Linux cross-memory attach (process_vm_readv, the
// host test mode). The sender's call completes once its payload is copied aside, so no send waits
// for its receiver's progress.
//
// A receive cannot know whether a message is an envelope before it lands, so every receive on a
// communicator where envelopes may travel decodes what it got: an envelope is exactly
// NM_ENV_WIRE bytes (13 x 32: a whole number of elements of every predefined type, which MPICH
// asserts of a contiguous receive; a size typed messages seldom have) starting with a 128-bit nonce
// drawn at MPI_Init and known only to this job's ranks. The receiver then pulls the payload into
// its buffer, sets the status's count to the payload's size, and tells the sender to free it.
// A probe that meets a message of the envelope's size takes the messages of its source out of the
// real MPI's matching, in their order, up to that one (the probe queue), so that it can report the
// payload's size; every receive consults that queue first, and a matched-probe's message comes
// back as a handle ncclmpi made. Persistent receives on such a communicator are ncclmpi's
// (persistent.h): each start receives on the application's communicator (or from the queue),
// decodes, and forwards to the application's request on a private communicator.
#ifndef NM_CORE_P2P_ENVELOPE_H
#define NM_CORE_P2P_ENVELOPE_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cuda/cuda_api.h"
#include "route/nm_op.h"
#include "route/route.h"

namespace ncclmpi {

enum { NM_ENV_WIRE = 416 };  // bytes of an envelope on the wire (a multiple of 32)
enum { NM_ENV_HOST = 0, NM_ENV_IPC = 1 };  // where a payload waits

struct Envelope {
    uint64_t nonce[2];
    uint64_t bytes;  // the payload's size
    uint64_t addr;   // NM_ENV_HOST: where it waits in the sender's process; NM_ENV_IPC: its offset
    int32_t pid;     // the sender's process
    int32_t wrank;   // the sender's rank in MPI_COMM_WORLD (where the release goes)
    uint32_t id;     // the sender's name for it
    uint32_t transport;
    int32_t slot;    // NM_ENV_IPC: the sender's copy event the pull waits for (-1: the copy is done)
    char ipc[64];    // NM_ENV_IPC: the CUDA IPC handle of the sender's device pool
};
static_assert(sizeof(Envelope) <= NM_ENV_WIRE, "an envelope fits its wire size");

// MPI_Init (collective on MPI_COMM_WORLD): draws and shares the nonce when envelopes are on.
void env_init();
}  // namespace ncclmpi
extern "C" int nm_env_active;  // envelopes are on (read on every host call: no function call)
namespace ncclmpi {
inline bool env_on() { return nm_env_active != 0; }
// Whether communicator comm may carry envelopes (an intracommunicator, envelopes on).
bool env_comm(MPI_Comm comm);

// A send that goes as an envelope: 1 with *rc when it did (o: a SEND op on host memory), 0 to let
// the real MPI send it as it is.
int env_send(nm_op_t *o, int *rc);
// NCCLMPI_P2P_ENVELOPE=device: a send of `bytes` contiguous bytes at device address src (device
// ordinal dev) goes as an envelope, its payload copied into this process's IPC-exported device
// pool; 1 with *rc when it did, 0 to stage it as before (too small, pool full). A nonblocking
// send queues its copy and its envelope (its request is a task): the envelopes queued go at the
// next env_flush_sends(), after one wait for their copies, so a burst of MPI_Isend waits for the
// GPU once. Each counts one in nm_hot.queued until then, so every call that may wait sends them
// first (engine_flush_all); only nonblocking receives and further such sends leave them queued.
int env_send_device(nm_op_t *o, const void *src, size_t bytes, int dev, int *rc);
// Whether o would be queued by env_send_device (a nonblocking device send that goes as an
// envelope, if the pool has room): such a call leaves the queued envelopes queued.
bool env_send_defers(const nm_op_t *o);
// A nonblocking staged send (env_send_defers(o); o's buffer is the host shadow of stage s, whose
// copy in stage_in only queued): queued with the envelopes, its request a task; the flush waits
// for the queued copies in once and hands the real MPI the sends in call order. 1 with *rc; 0
// (the type could not be duplicated): not queued.
struct Stage;
int env_send_staged(nm_op_t *o, Stage *s, int *rc);
// The sizes that shape this process's device point-to-point: NCCLMPI_P2P_ENVELOPE_MIN and
// NCCLMPI_P2P_COPY_BATCH, or, with NCCLMPI_P2P_ENVELOPE=auto where the ranks outnumber the GPUs
// and this process does not run under MPS, larger envelopes only and no copy kernels (route.h,
// nm_p2p_limits). Decided at the first call with the driver loaded (a device send or copy);
// before that, and without envelopes on GPUs, the settings.
const nm_p2p_limits_t &env_limits();
// The facts nm_p2p_limits decides from: the job's ranks, this node's GPUs, whether MPS serves
// this process (one-sided copies use them too: core/tl/rma/window.cc).
struct NodeGpus {
    int world_size, gpus, mps;
};
NodeGpus node_gpus();
// Send the queued envelopes and staged sends, in the order of their calls. A device payload's
// envelope goes as soon as its copy into the pool is queued, naming the pool's copy event recorded
// after it (the receiver's pull waits for that on the GPU); its request then completes once the
// copy is done too (Task::set_copy), which env_copy_poll tells.
void env_flush_sends();
// Whether copy event `slot` of device `pool`'s envelope pool has passed: NM_OK, NM_INPROGRESS, or
// NM_ERR_CUDA (sweep: tasks_progress's; an event found not done is not asked again in the same
// sweep). env_copy_drop gives back the reference a request held on it.
nm_status_t env_copy_poll(int pool, int slot, uint64_t sweep);
void env_copy_drop(int pool, int slot);
bool env_device();

// Whether comm is revoked (ULFM, where the MPI has it): the real MPI fails a blocking receive there
// at once.
bool comm_revoked(MPI_Comm comm);

// Whether a probe took messages out of the real MPI's matching that no receive has had yet (the
// probe queue, any communicator): a receive may have to take one of them first.
bool env_holds_messages();

// A receive with room for fewer bytes than an envelope (not persistent, not of a matched message,
// while no probe holds messages back): it has nothing to decode, since an envelope sent to it is
// too long for it, which the real MPI reports itself (MPI_ERR_TRUNCATE, as for any message too
// long; the sender's payload is then freed at MPI_Finalize). Such a receive goes straight to the
// real MPI. rd: the receive type's facts (dtype_info(o->rtype)).
struct DtypeInfo;
bool env_receive_exempt(const nm_op_t *o, const DtypeInfo *rd);

// A receive that may have got an envelope: what it needs after the real MPI completed it.
struct Decode {
    void *buf;
    int count;
    MPI_Datatype type;
    MPI_Comm comm;
    MPI_Status status;  // the receive's, where the caller passed MPI_STATUS_IGNORE
    bool has_preset = false;  // delivered from the probe queue at the call: the status to report
    MPI_Status preset;
    int preset_rc = MPI_SUCCESS;
};
// Decoding states come from a pool (one per nonblocking host receive: no allocation per call).
Decode *decode_new(const Decode &init);
void decode_free(Decode *d);  // (null: nothing)
// The message that landed in d's buffer with status *st: when it is an envelope, its payload is
// pulled into the buffer and *st counts the payload. Returns an MPI code (MPI_ERR_TRUNCATE when
// the payload does not fit; MPI_ERR_OTHER when it cannot be pulled).
int env_finish(const Decode &d, MPI_Status *st);
// The same for bytes that landed contiguously at `at` (a staged receive's host shadow of `cap`
// bytes). dev_at: the device buffer the shadow stands for: a payload in a device pool goes there
// directly (*direct set), else into the shadow.
// With `stream`, a device payload's copy is only queued there: the caller sends *later (the
// sender's leave to reuse the payload's memory) with env_release once the stream has done it.
struct EnvRelease {
    int wrank = -1;
    uint32_t id = 0;  // 0: nothing to release
};
int env_finish_bytes(void *at, size_t cap, MPI_Status *st, void *dev_at, bool *direct, CUstream stream = nullptr,
                     EnvRelease *later = nullptr);
void env_release(const EnvRelease &r);
// Releases this thread makes between env_releases_hold(true) and the matching (false) (one
// progress sweep over the pending requests) wait, and then go as one message per sender instead
// of one per payload. Nests.
void env_releases_hold(bool on);

// A receive that a message taken out of matching by a probe satisfies (the probe queue, or a
// message handle ncclmpi made for MPI_Mprobe): delivered now, 1 with *rc (a nonblocking call gets
// a request that completes at once). 0: the real MPI receives. s: the stage of a receive into
// device memory (o's buffers are its host shadows): what is delivered there goes back to the
// device, when the call returns or when its request completes.
struct Stage;
int env_recv_queued(nm_op_t *o, int *rc, Stage *s);

// Persistent receives on a communicator that may carry envelopes are ncclmpi's (persistent.cc):
// the application's request receives from a private communicator, where ncclmpi forwards what
// its own receive on the application's communicator got, decoded.
// Its tags: those below NM_SELF_KEY0 name fabricated message handles (a message to itself,
// probed at once), those from it on persistent requests (persistent.cc), which stay posted, so
// that a fabricated message never matches one of them.
MPI_Comm env_self_comm();
enum { NM_SELF_KEY0 = 0x8000 };
// A receive of at most cap bytes (as MPI_PACKED) into buf from (src, tag) on comm: 1 when a
// message a probe took out of matching satisfied it at once (*st its status, *rc its code), else
// 0 with *inner the real MPI's request.
int env_recv_bytes(MPI_Comm comm, int src, int tag, void *buf, size_t cap, MPI_Request *inner, MPI_Status *st, int *rc);

// MPI_THREAD_MULTIPLE: a probe's drain takes messages out of the real MPI's matching (the probe
// queue above). Run between a receive's look at that queue and its post to the real MPI, it could
// take the message the receive was about to match, and the receive would wait for good. So a
// receive holds the receive gate, shared, from before its first look (env_gate_hold) until its
// message came from the queue or its real receive is posted (env_gate_drop), and a drain holds it
// alone. Nothing that waits runs under it: a blocking receive is posted as its nonblocking form
// (env_gate_post) and waited for after the drop. Below MPI_THREAD_MULTIPLE it is never taken.
}  // namespace ncclmpi
extern "C" __thread int nm_env_gate __attribute__((tls_model("initial-exec")));  // this thread holds it
namespace ncclmpi {
// o: the call's descriptor (only receives that post to the real MPI take it, not one from
// MPI_PROC_NULL).
void env_gate_hold_mt(const nm_op_t *o);
inline void env_gate_hold(const nm_op_t *o)
{
    extern int nm_thread_multiple;  // (engine.h)
    if (__builtin_expect(nm_thread_multiple, 0)) env_gate_hold_mt(o);
}
void env_gate_drop();
// The real MPI's call for receive o (from its descriptor) posted under the gate, which is then
// dropped; a blocking one waits after the drop. Returns the real MPI's code.
int env_gate_post(nm_op_t *o);

// MPI_Comm_free of comm (its state's delete callback): the messages a probe took out of matching
// on it that no receive took are dropped (envelopes: their senders told to free the payloads),
// so that a communicator made later with the same handle never gets them.
void env_comm_freed(MPI_Comm comm);

// Releases received and sent; payloads released by their receivers are freed.
void env_progress();
// MPI_Finalize: payloads not released yet are freed after a short wait.
void env_drain();

}  // namespace ncclmpi
#endif
