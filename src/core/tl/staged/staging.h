// ncclmpi: the staged path. Device buffers are copied into pinned host memory (pooled, on the
// GPU's NUMA node), the real MPI runs on the copies, results are copied back.
#ifndef NM_CORE_STAGING_H
#define NM_CORE_STAGING_H
#include <stddef.h>

#include <string>

#include "core/dtype/buffers.h"
#include "core/cuda/cuda_api.h"
#include "route/nm_op.h"
#include "route/route.h"
#include "util/status.h"

namespace ncclmpi {
struct Decode;

// One device's context and the NUMA node nearest to it (shared by every thread).
struct Device {
    int ordinal = -1;
    CUcontext ctx = nullptr;
    int numa = -1;  // NUMA node closest to the GPU, -1 unknown
};
Device *device_get(int ordinal);

// Where a blocking staged call waits, for the watchdog's warning (util/watchdog.h).
extern const char stage_wait_reason[];

struct PullBatch;
// The calling thread's copy streams and events on a device: staged calls of different threads
// never share a stream (MPI_THREAD_MULTIPLE).
struct Lane {
    Device *dev = nullptr;
    PullBatch *open = nullptr;   // pulls queued on `stream`, not launched yet (stage_pull_async)
    CUstream stream = nullptr;   // device-to-host copies
    CUstream stream2 = nullptr;  // host-to-device copies (both directions overlap in a pipeline)
    CUevent order_ev = nullptr;
    CUevent in_ev[2] = {nullptr, nullptr}, out_ev[2] = {nullptr, nullptr};
};
Lane *lane_get(Device *d);

// Make the legacy stream's work visible to `s` (NCCLMPI_STREAM_ORDER).
nm_status_t order_after_app(Lane *l, CUstream s);

struct Stage;

// Events (timing off) that mark the end of a copy, from a per-device free list (null: none).
CUevent ev_get(Device *d);
void ev_put(Device *d, CUevent e);

// Swap the device buffers among b[0..nb) for host shadows in `o` (copying in what the call
// reads, unless !copy_in: the caller copies) and mark o NM_OPF_STAGED. `*out` owns the shadows.
nm_status_t stage_in(nm_op_t *o, const BufRef *b, int nb, Stage **out, bool copy_in = true);
// Copy what the call reads to the host shadows, after the application's work on the legacy
// stream (waits for the copy; a call that only receives waits for nothing). stage_in does it,
// except for a persistent call, whose every MPI_Start does. later: the copy is followed by an
// event instead of the wait.
nm_status_t stage_copy_in(Stage *s, bool later = false);
// A call that reads one staged region whose shadow this device's kernels may write (pinned,
// mapped at its own address): what to copy in (the copy kernel may do it instead of
// stage_copy_in).
bool stage_copy_target(const Stage *s, const void **src, void **dst, size_t *n, Device **dev);
// Copy bytes [off, off + len) of the stage's one region (clipped to it) between the device
// buffer and its shadow, synchronously: to the host after the application's work on the legacy
// stream, to the device before the caller returns (the partitions of a partitioned request:
// partitioned.cc).
nm_status_t stage_copy_range(Stage *s, size_t off, size_t len, bool to_device);
// Wait for the queued copies in of v[0..n) (stage_copy_in's `later`), their results into st[0..n):
// per copy stream, one wait, for the last of them (a stream runs its copies in order; the
// stages of one stream are in the order of their calls).
void stage_in_wait(Stage *const *v, size_t n, nm_status_t *st);
// Whether the call writes a staged buffer (a receive): stage_finish has something to copy back.
bool stage_has_out(const Stage *s);
// Copy what the call wrote back to the device buffers (synchronous). recv_status: a
// point-to-point receive's status, so that only the bytes received go back (null: all).
nm_status_t stage_finish(Stage *s, MPI_Status *recv_status);
// The same in two steps, so that the copies back of many requests overlap: begin queues the
// copies and returns NM_INPROGRESS while they run (else the final status); poll returns
// NM_INPROGRESS until they are done (wait: until then), then the status stage_finish would.
// (sweep: the caller's progress sweep, op_poll's; 0: none)
nm_status_t stage_finish_begin(Stage *s, MPI_Status *recv_status);
nm_status_t stage_finish_poll(Stage *s, bool wait, uint64_t sweep = 0);
void stage_release(Stage *s);
// A receive's pull of n bytes at src (a peer's pool, mapped here, or a mapped host shadow) into
// device memory at dst, queued on `stream` (the calling thread's lane's): copies queued by
// stage_finish_begin calls
// are launched together, by one copy kernel, at stage_pulls_issue (or when one of them is
// waited for) and share one event. Larger than NCCLMPI_P2P_COPY_BATCH, without the kernel, or
// unaligned: a driver copy at once.
bool stage_pull_async(void *dst, CUdeviceptr src, size_t n, CUstream stream);
// Launch the pulls the calling thread queued (the end of a progress sweep over its requests).
void stage_pulls_issue();
// After the core's own call of the real MPI for o (rc its result; dispatch.cc): copy the staged
// shadows back (NM_OPF_STAGED; a nonblocking call's copy waits for its request, a persistent
// one's for each completion) or decode what a host receive got (NM_OPF_DECODE); an error goes
// through the communicator's error handler. Returns the call's result.
int real_done(nm_op_t *o, int rc);
// The core's own call of the real MPI for o: its entry point's, except an MPI_Isendrecv(_replace)
// that ncclmpi completes itself (staged, or decoding what it gets) under MPICH, whose status of
// one is not filled in (design.md, "MPICH"): a receive and a send there, the send handed to the
// call's task by real_done.
int real_post(nm_op_t *o);
// A staged receive that a message taken out of matching by a probe satisfied when it was made:
// stage_finish reports d's preset status and code (d is the stage's now).
void stage_set_decode(Stage *s, Decode *d);

struct OpCtx;
// Large blocking elementwise collectives (allreduce, reduce, bcast, scan) on device buffers
// (pipeline.cc): chunks of NCCLMPI_STAGE_CHUNK bytes, cut the same way on every rank (route.h,
// nm_stage_pipeline: a reduction in whole elements of its datatype, which its op gets; Bcast in
// bytes, whatever each rank's datatype); copy-in of chunk k+1 and copy-out of chunk k-1 overlap
// the real MPI's work on chunk k. A rank whose layout is not contiguous packs the whole buffer on
// the host first and makes the same calls. Every rank agrees (one small allreduce) that every
// rank can take part before the first chunk, and on the outcome after the last: a failure on one
// rank (host memory, a copy) is every rank's error, with the same class. *mpi_rc gets the real
// MPI's return code; *why the error's reason. The decision uses shared facts only.
bool stage_pipeline_applies(const OpCtx &c, nm_pipe_t *plan);
nm_status_t stage_pipelined(const OpCtx &c, const nm_pipe_t &plan, int device, int *mpi_rc, std::string *why);

// Pinned host memory from the pool (NUMA-local to `dev` when hwloc can tell; dev == nullptr:
// the current context registers it).
// *mapped (when asked): mapped at its own address for dev, whose kernels may read and write it.
void *pinned_get(size_t bytes, Device *dev, size_t *got, bool *mapped = nullptr);
void pinned_put(void *p, size_t bytes);
void pinned_trim();

}  // namespace ncclmpi
#endif
