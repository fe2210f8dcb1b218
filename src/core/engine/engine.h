// ncclmpi: the execution engine between dispatch and the process groups.
//
// A device collective on the NCCL route becomes an Op. A blocking one is launched alone (after
// whatever its communicator has queued) and waited for. A nonblocking one is queued on its
// communicator (NCCLMPI_COALESCE=1) and launched at the process's next MPI call that is not
// another nonblocking device collective: consecutive operations form one NCCL group, whose
// extent every rank agrees on with one small PMPI_Iallreduce (MIN) on the communicator's hidden
// duplicate. The argument that this never hangs a legal program and that every rank forms the
// same groups is in doc/design.md ("Coalescing").
// Explicit groups (ncclmpi_group_begin/end) are the user's promise that every rank groups alike:
// no agreement is needed.
#ifndef NM_CORE_ENGINE_H
#define NM_CORE_ENGINE_H
#include <mpi.h>
#include <sched.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/engine/op.h"
#include "util/status.h"

namespace ncclmpi {

// The real MPI runs at MPI_THREAD_MULTIPLE; at MPI_THREAD_SINGLE (set at MPI_Init).
extern int nm_thread_multiple;
extern int nm_thread_single;

// Whether an operation may wait for the rank's next MPI call before it goes out (a nonblocking
// collective queued for coalescing, a nonblocking send in the envelopes' send queue). Not under
// MPI_THREAD_MULTIPLE: another thread of the rank may already wait inside the real MPI for what the
// operation leads to at a peer, and no call of ncclmpi's would come to flush it
// (test/mpi/p2p_blocked_thread).
inline bool engine_may_hold() { return !nm_thread_multiple; }

// A lock that only MPI_THREAD_MULTIPLE needs (the engine's pools, task lists, communicator queues
// and NCCL use): at a lower thread level one thread at a time is inside MPI, so inside ncclmpi
// (the application's own synchronisation orders them), and the lock costs nothing.
template <class M>
class MtLock {
  public:
    explicit MtLock(M &m) : m_(nm_thread_multiple ? &m : nullptr)
    {
        if (m_) m_->lock();
    }
    ~MtLock()
    {
        if (m_) m_->unlock();
    }
    MtLock(const MtLock &) = delete;
    MtLock &operator=(const MtLock &) = delete;

  private:
    M *m_;
};

// A free list of objects that are reused, never freed (operations, completions, tasks): no
// allocation per operation once warm. Locked only under MPI_THREAD_MULTIPLE.
template <class T>
class FreeList {
  public:
    T *get()
    {
        {
            MtLock<std::mutex> g(mu_);
            if (!items_.empty()) {
                T *x = items_.back();
                items_.pop_back();
                return x;
            }
        }
        return new T;
    }
    void put(T *x)
    {
        MtLock<std::mutex> g(mu_);
        items_.push_back(x);
    }

  private:
    std::mutex mu_;
    std::vector<T *> items_;
};


struct CommState;

// A blocking operation: launched after its communicator's queue, waited for (MPI keeps
// progressing, NCCLMPI_TIMEOUT and NCCL's asynchronous errors are watched). Releases op.
nm_status_t engine_run_blocking(Op *op, std::string *err);
// A nonblocking operation (op->task set): queued, or launched at once. The task owns op after.
nm_status_t engine_submit(Op *op, std::string *err);
// A blocking operation enqueued on the application's stream s (MPIX_*_enqueue): launched where a
// blocking call would be, on s, and not waited for; finished at a later progress point or at
// MPI_Finalize. Releases op on failure.
nm_status_t engine_run_enqueued(Op *op, CUstream s, std::string *err);
// Give every enqueued op launched so far its marker now (a stream is about to go: the last
// reference to an MPIX stream object was dropped).
void engine_enqueued_mark();

// Flush points. Send the queued point-to-point envelopes (env_flush_sends) and launch every
// queued operation of every communicator as a group of its own (agreement proposals of 1, whose
// outcome is known: never waits for a peer); _except: the communicators only, keep's left.
void engine_flush_all();
void engine_flush_all_except(const CommState *keep);
// A wait that needs the queued operation `seq` of cs to complete: propose groups as large as the
// queue and wait for the agreement (the peers reach it at their next MPI call).
nm_status_t engine_flush_waitable(CommState *cs, uint64_t seq);
// ncclmpi_group_begin/end: ops of the calling thread are held and launched together at end.
int engine_group_begin();
int engine_group_end();
int engine_group_depth();
// Complete agreement rounds whose result was not needed (called at progress points).
void engine_progress();
// Operations launched on this process's NCCL communicators and not finished yet (a destroy
// waits until there are none: comm/side_cache.h).
long engine_inflight();
// MPI_Finalize: cs's agreement rounds still in flight completed (bounded by NCCLMPI_TIMEOUT).
void engine_rounds_drain(CommState *cs);
// At MPI_Finalize: complete the agreement rounds left in flight and free what they held.
void engine_drain();
// The MPI communicator is being freed: launch its queue, release its hidden duplicate.
void engine_comm_freed(CommState *cs);

// Completion of a launched op, non-blocking: true when done (*st tells how), false while running
// or queued. Watches NCCLMPI_TIMEOUT and NCCL's asynchronous errors.
// sweep: a number the caller's pass over many ops shares (0: none); ops of one launch then cost
// one event query per pass
bool op_poll(Op *op, nm_status_t *st, std::string *err, uint64_t sweep);
// Release a completed op (host-side copies done, resources back to their pools). failed: the op's
// communicator was aborted.
void op_finish(Op *op, bool failed);

// Make the real MPI progress (ranks that wait on the GPU must keep it moving).
void mpi_progress();
// One turn of a host wait on the GPU: the real MPI every 16 turns, the CPU yielded every 1024.
inline void wait_step(unsigned spin)
{
    if ((spin & 15) == 15) mpi_progress();
    if ((spin & 1023) == 1023) sched_yield();
}

}  // namespace ncclmpi
#endif
