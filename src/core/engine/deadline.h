// ncclmpi: NCCLMPI_TIMEOUT, one deadline for every wait inside ncclmpi that it can end itself
// (doc/design.md, "Failures end in errors"): an NCCL operation's completion (op_poll), an
// agreement round, an operation enqueued on a stream, ncclmpi's own agreements over a
// communicator (its NCCL side's creation and connection, the NCCLMPI_AGREE=1 route vote, the
// stream communicator's check) and what MPI_Finalize waits for. A wait inside a blocking call of
// the real MPI cannot be ended from here: it is marked fatal for the watchdog (util/watchdog.h),
// which aborts the job after 1.5 T + 1 s, once the ranks whose waits end at T have reported.
#ifndef NM_CORE_ENGINE_DEADLINE_H
#define NM_CORE_ENGINE_DEADLINE_H
#include <mpi.h>

#include <string>

#include "util/config.h"
#include "util/log.h"
#include "util/status.h"

namespace ncclmpi {

// The likely causes a wait for the other ranks names when it runs out.
extern const char kPeersCause[];

class Deadline {
  public:
    explicit Deadline(double t0) : t0_(t0) {}
    Deadline() : t0_(nm_now_s()) {}
    double start() const { return t0_; }
    // Whether NCCLMPI_TIMEOUT, when set, has passed at `now`.
    bool passed(double now) const { return nm_cfg.TIMEOUT > 0 && now - t0_ > (double)nm_cfg.TIMEOUT; }
    // The message of every wait that ran out: "<what> did not complete in T s (NCCLMPI_TIMEOUT):
    // <cause>" (cause: kPeersCause when null). (Kept short: an MPI error string holds 256 bytes.)
    static std::string expired(const std::string &what, const char *cause = nullptr);

  private:
    double t0_;
};

// One of ncclmpi's own agreements over comm, where every rank of comm runs the same ones in the
// same order (a creation's table, a vote): an allgather of `bytes` bytes from each rank into all
// (comm's size times bytes), or the minimum of an int. They are nonblocking calls of the real
// MPI, waited for while the real MPI progresses (so never matched with an application's blocking
// collective of a rank that took another path: MPI-3.1 5.12), with the deadline from their
// start. NM_OK; NM_ERR_MPI; or NM_ERR_TIMEOUT, with *err naming the call (the thread's marked
// wait: the wrapper's MPI function), `what` (as the wait's mark says, or the caller's), comm
// (its description `desc`) and the causes; the request and its buffers then go on in the
// background (never waited for). `what` null: the thread's marked wait's reason.
nm_status_t agree_allgather(const void *mine, void *all, int bytes, MPI_Comm comm, const std::string &desc,
                            const char *what, std::string *err);
nm_status_t agree_min(int mine, int *all, MPI_Comm comm, const std::string &desc, const char *what, std::string *err);
nm_status_t agree_barrier(MPI_Comm comm, const std::string &desc, const char *what, std::string *err);
// agree_min where NCCLMPI_TIMEOUT is set; without it one blocking PMPI_Allreduce (MIN), which
// never ends in NM_ERR_TIMEOUT: Open MPI 4.1's nonblocking collectives, progressed by several
// threads at once, crashed in its libnbc, and there is no deadline to keep then. For the short
// agreements that every call of a kind makes (the NCCLMPI_AGREE vote, the NCCLMPI_RENDEZVOUS turn,
// the creation's connection steps); every rank shares the setting (checked at MPI_Init).
nm_status_t agree_min_bounded(int mine, int *all, MPI_Comm comm, const std::string &desc, const char *what, std::string *err);
// The error text of a wait that ran out: "<desc>: <what> did not complete in ..." (what null: the
// reason of the calling thread's marked wait).
std::string deadline_message(const char *what, const std::string &desc);
// Requests left by agreements that ran out: those that completed since are released (engine
// progress; cheap when there are none).
void deadline_progress();

}  // namespace ncclmpi
#endif
