/* ncclmpi: the wait watchdog. A wait ncclmpi makes that can last as long as a peer stays away
 * (a device-buffer call staged through the real MPI, a communicator's NCCL creation, the
 * NCCLMPI_AGREE=1 route vote, ncclmpi's own MPI_Wait loops, MPI_Finalize's drain) is marked by the waiting thread; a background thread, started at the first
 * mark when NCCLMPI_WARN_AFTER > 0, warns once per wait that lasts longer than that many seconds,
 * naming the call and where it waits, so that a job stuck on a missing or dead peer says where.
 * The background thread makes no MPI or CUDA call; marking is two stores and a clock read.
 * (Waits on the NCCL route warn from their own polling loop.) */
#ifndef NM_UTIL_WATCHDOG_H
#define NM_UTIL_WATCHDOG_H
#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread starts waiting in call (an MPI function name without "MPI_") for the
 * reason `where` (a string that outlives the wait). Waits do not nest: an inner begin replaces
 * the outer one, and its end ends both. */
void nm_wd_begin(const char *call, const char *where);
void nm_wd_end(void);
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
    WaitWatch(const char *call, const char *where) { nm_wd_begin(call, where); }
    ~WaitWatch() { nm_wd_end(); }
    WaitWatch(const WaitWatch &) = delete;
    WaitWatch &operator=(const WaitWatch &) = delete;
};
}  // namespace ncclmpi
#endif
#endif
