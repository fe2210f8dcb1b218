/* ncclmpi: the wait watchdog. A wait ncclmpi makes that can last as long as a peer stays away
 * (a device-buffer call staged through the real MPI, a communicator's NCCL creation, the
 * NCCLMPI_AGREE=1 route vote, ncclmpi's own MPI_Wait loops, MPI_Finalize's drain) is marked by the waiting thread; a background thread, started at the first
 * mark when NCCLMPI_WARN_AFTER > 0 or NCCLMPI_TIMEOUT > 0, warns once per wait that lasts longer than that many seconds,
 * naming the call and where it waits, so that a job stuck on a missing or dead peer says where.
 * A wait marked *fatal* is one inside a blocking call of the real MPI, which nothing can end but
 * the job's end: with NCCLMPI_TIMEOUT=T it aborts the job (PMPI_Abort, after an ERROR line naming
 * the call, where it waits and the likely causes) once it has waited 1.5 T + 1 s, so that the
 * ranks whose own waits can end (at T: ncclmpi's polled waits, core/engine/deadline.h) report
 * their errors first. A fatal wait may carry a limit of its own, shorter than that or where no
 * NCCLMPI_TIMEOUT is set: a rank whose own part of a communicator's NCCL creation failed (its
 * ncclCommInitRank, a connection call) waits for its peers to learn it, and a peer still inside
 * NCCL's own wait for that rank never will (doc/design.md, "NCCL's own waits"); after
 * NCCLMPI_CREATE_GRACE seconds the failing rank aborts the job, saying so. Otherwise the background
 * thread makes no MPI or CUDA call; marking is a few stores and a clock read. (Waits on the NCCL
 * route warn from their own polling loop.) */
#ifndef NM_UTIL_WATCHDOG_H
#define NM_UTIL_WATCHDOG_H
#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread starts waiting in call (an MPI function name without "MPI_") for the
 * reason `where` (a string that outlives the wait). Waits do not nest: an inner begin replaces
 * the outer one, and its end ends both. */
void nm_wd_begin(const char *call, const char *where);
/* The same for a wait inside a blocking call of the real MPI (fatal, above) on ncclmpi's
 * communicator comm_id (CommState::id; -1: none) */
void nm_wd_begin_fatal(const char *call, const char *where, int comm_id);
/* A fatal wait that also aborts the job after `limit` seconds (> 0), NCCLMPI_TIMEOUT or not;
 * `where` then says what failed on this rank (the abort's message names NCCLMPI_CREATE_GRACE) */
void nm_wd_begin_fatal_limit(const char *call, const char *where, int comm_id, double limit);
void nm_wd_end(void);
/* The calling thread's wait now (as its last begin named it), or NULLs */
void nm_wd_current(const char **call, const char **where);
/* How long a fatal wait lasts before the job is aborted (seconds; 0: never) */
double nm_wd_fatal_after(void);
/* MPI_Finalize: the background thread stops. */
void nm_wd_stop(void);
/* Warnings given so far (tests). */
unsigned long nm_wd_warnings(void);

#ifdef __cplusplus
}
namespace ncclmpi {
// A wait of the calling thread, for the scope of this object.
class WaitWatch {
public:
    WaitWatch(const char *call, const char *where, bool fatal = false, int comm_id = -1)
    {
        if (fatal) nm_wd_begin_fatal(call, where, comm_id);
        else nm_wd_begin(call, where);
    }
    ~WaitWatch() { nm_wd_end(); }
    WaitWatch(const WaitWatch &) = delete;
    WaitWatch &operator=(const WaitWatch &) = delete;
};
// A fatal wait of the calling thread inside its current one (the call that wait names, else
// `call`), for the scope of this object; the outer wait then resumes, timed afresh and not fatal
// (used inside ncclmpi's own creation waits, which are not). limit > 0: nm_wd_begin_fatal_limit.
class InnerFatalWait {
public:
    InnerFatalWait(const char *call, const char *where, int comm_id, double limit = 0)
    {
        nm_wd_current(&call_, &outer_);
        if (!call_) call_ = call;
        if (limit > 0) nm_wd_begin_fatal_limit(call_, where, comm_id, limit);
        else nm_wd_begin_fatal(call_, where, comm_id);
    }
    ~InnerFatalWait()
    {
        nm_wd_end();
        if (outer_) nm_wd_begin(call_, outer_);
    }
    InnerFatalWait(const InnerFatalWait &) = delete;
    InnerFatalWait &operator=(const InnerFatalWait &) = delete;

private:
    const char *call_ = nullptr, *outer_ = nullptr;
};
}  // namespace ncclmpi
#endif
#endif
