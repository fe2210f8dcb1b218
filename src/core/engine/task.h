// ncclmpi: a task is one device operation behind a user's MPI_Request. The request is a real
// generalized request (MPI_Grequest_start), so it works in every Wait/Test form and in arrays
// mixed with the application's own requests; ncclmpi completes it when the work is done.
// A task runs an Op on the NCCL route, or waits for the real MPI's request of a staged call and
// then copies back. Tasks come from a pool.
// A task that fails completes its generalized request as if it had succeeded and records the
// error: the Wait and Test wrappers then report it through the error handler of the operation's
// communicator, as the real MPI does for its own requests (it would raise a generalized request's
// error on MPI_COMM_SELF's handler). When the real MPI's own request behind a staged task failed,
// its Test already called that handler: the wrapper then only returns the error.
#ifndef NM_CORE_TASK_H
#define NM_CORE_TASK_H
#include <mpi.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/cuda/cuda_api.h"
#include "route/nm_op.h"
#include "util/status.h"

namespace ncclmpi {

struct Op;
struct Stage;
struct Decode;

class Task {
  public:
    static Task *get(const nm_op_t *o);
    // NCCL route: completion is the op's (launched now or later by the engine).
    void set_op(Op *op) { op_ = op; }
    // Staged route: completion is the real MPI's request, then the copy back of `stage`.
    void set_inner(MPI_Request inner, Stage *stage);
    // A host receive that may get an envelope, under MPI_THREAD_MULTIPLE: decoded when the inner
    // request completes (owned). (Otherwise the application holds the real MPI's request and the
    // Wait or Test that completes it decodes: persistent.h. A table by handle cannot serve
    // several threads: between the real MPI freeing a completed request and ncclmpi's lookup,
    // another thread's new request may get the same handle.)
    void set_decode(Decode *d) { decode_ = d; }
    // A send whose real-MPI request does not exist yet (an envelope queued until the next flush,
    // envelope.h): the task is not complete while it waits; sent() gives it its request, or the
    // error that kept it from being sent.
    void set_deferred() { deferred_ = true; }
    // A send whose envelope left while its payload's copy into the pool ran (envelope.h): not
    // complete before copy event `slot` of device `pool`'s pool has passed (a reference to it, given
    // back then).
    void set_copy(int pool, int slot)
    {
        copy_pool_ = pool;
        copy_slot_ = slot;
    }
    // A neighbourhood collective run as point-to-point (neighbor.h): complete once every one of
    // reqs (ncclmpi's own requests: own_request_done) is, failed with the first failure, or with
    // rc when one of its calls could not be made.
    void set_group(std::vector<MPI_Request> reqs, int rc)
    {
        group_ = std::move(reqs);
        is_group_ = true;
        group_rc_ = rc;
    }
    void sent(MPI_Request inner, nm_status_t st, const char *why);
    // MPI_Isendrecv(_replace) made as a receive (the inner request) and this send (real_post,
    // under MPICH): not complete before both are; `copy` (what a replace sends) is kept until then.
    void set_send(MPI_Request send, std::vector<char> copy)
    {
        send_ = send;
        send_copy_ = std::move(copy);
    }
    // Hand the user a generalized request standing for this task. Returns an MPI code.
    int publish(MPI_Request *user_req);
    // The op could not be launched: the task completes with this error.
    void fail_op(nm_status_t st, const std::string &why);
    // Non-blocking completion check; completes the generalized request when done.
    bool poll(uint64_t sweep);  // sweep: see op_poll
    // One line for logs and error messages: "task#12 MPI_Iallreduce on comm3{...} seq 5, 3.2 ms".
    std::string describe() const;
    MPI_Request greq() const { return greq_; }
    Op *op() const { return op_; }

  private:
    Task() = default;
    static int query_fn(void *extra, MPI_Status *status);
    static int free_fn(void *extra);
    static int cancel_fn(void *extra, int complete);
    void complete(int mpi_rc);
    void recycle();
    // Whether its inner request can have been cancelled (point-to-point): only then does its
    // status's cancelled flag mean anything (Open MPI 4.1 now and then reports a completed
    // nonblocking file read as cancelled)
    bool may_cancel() const { return (nm_opk(kind_) & NM_KF_P2P) != 0; }

    uint64_t id_ = 0;
    int fn_ = 0, kind_ = 0;
    MPI_Comm comm_ = MPI_COMM_NULL;  // whose error handler reports a failure
    Op *op_ = nullptr;
    MPI_Request inner_ = MPI_REQUEST_NULL;
    MPI_Request send_ = MPI_REQUEST_NULL;  // set_send
    std::vector<char> send_copy_;
    int send_rc_ = MPI_SUCCESS;
    Stage *stage_ = nullptr;
    Decode *decode_ = nullptr;
    std::vector<MPI_Request> group_;  // set_group
    bool is_group_ = false;
    int group_rc_ = MPI_SUCCESS;
    MPI_Request greq_ = MPI_REQUEST_NULL;
    MPI_Status inner_status_;
    bool has_status_ = false;
    bool inner_failed_ = false;  // the real MPI's request failed (its Test called the handler)
    bool copying_ = false;       // the inner request is done, the copy back under way
    std::atomic<bool> deferred_{false};  // set_deferred(), until sent()
    int copy_pool_ = -1, copy_slot_ = -1;  // set_copy()
    int mpi_rc_ = MPI_SUCCESS;
    std::string why_;              // written before failed_ is published
    std::atomic<int> failed_{NM_OK};
    double t0_ = 0;
    bool done_ = false, freed_ = false;

    friend void tasks_reap();
    template <class T>
    friend class FreeList;  // the pool makes them
};

void tasks_progress();
void tasks_reap();
// The failure of completed request `req` (one of ncclmpi's tasks), taken before anything frees it:
// true with its code and whether a handler already saw it; false when it did not fail. (Used where
// ncclmpi itself completes a task's request, not a Wait or Test wrapper.)
bool task_take_failure(MPI_Request req, int *code, bool *reported);
// ncclmpi's own requests: those of calls it ran with NM_OPF_TASK (a task's generalized request, or
// the real MPI's request of a call that needs nothing after it). Whether *r completed (true for
// MPI_REQUEST_NULL); then it is freed, *st holds its status and *err its failure (*reported: a
// handler saw it already).
bool own_request_done(MPI_Request *r, MPI_Status *st, int *err, bool *reported);
// Wait for all of r[0..n) (ncclmpi's own), ncclmpi and the real MPI progressing; the first
// failure's code (its handler not called), or MPI_SUCCESS. call: the MPI function (the watchdog's).
int own_requests_wait(int n, MPI_Request *r, const char *call);
// Wait for every outstanding task (MPI_Finalize).
void tasks_drain();
// The requests a layer above the tasks holds (the staged persistent requests of
// tl/staged/persistent.cc, which registers its table when the library loads): moved along at each
// sweep of tasks_progress, drained after the tasks at MPI_Finalize, and completed with the Wait and
// Test forms. That layer completes its own calls through own_request_done; registering keeps this
// file from calling back into it.
struct RequestTable {
    void (*progress)();
    void (*drain)();
    bool (*owns)(int n, const MPI_Request *reqs);  // whether one of reqs[0..n) is one of its
    int (*completed)(MPI_Request req, MPI_Status *st, bool gone);  // after a form completed req
};
void tasks_set_request_table(const RequestTable *t);
// An MPI error code of class `cls` whose MPI_Error_string is `msg` (one code per message).
int nm_error_code(int cls, const char *msg);
int nm_error_class(nm_status_t st);
// An error of ncclmpi's own in MPI function fn: st's standard class with the message "ncclmpi:
// MPI_<fn>: why (st)", logged, raised through the error handler of file fh when there is one,
// else of comm (MPI_COMM_WORLD's when null). Returns the error code.
int nm_raise_error(int fn, nm_status_t st, const char *why, MPI_Comm comm, MPI_File fh = MPI_FILE_NULL);
// What every error of ncclmpi's own goes through: a code of class cls with the message "ncclmpi:
// call: why", logged, raised through the error handler of fh, else win, else comm (else
// MPI_COMM_WORLD's). Returns the error code.
int nm_raise_call(const char *call, int cls, const char *why, MPI_Comm comm, MPI_File fh = MPI_FILE_NULL,
                  MPI_Win win = MPI_WIN_NULL);

}  // namespace ncclmpi
#endif
