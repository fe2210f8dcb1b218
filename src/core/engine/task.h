// ncclmpi: a task is one device operation behind a user's MPI_Request. The request is a real
// generalized request (MPI_Grequest_start), so it works in every Wait/Test form and in arrays
// mixed with the application's own requests; ncclmpi completes it when the work is done.
#ifndef NM_CORE_TASK_H
#define NM_CORE_TASK_H
#include <mpi.h>

#include <string>

#include "core/cuda/cuda_api.h"
#include "route/nm_op.h"
#include "util/status.h"

namespace ncclmpi {

class ProcessGroup;
struct Stage;

class Task {
  public:
    Task(const nm_op_t *o, ProcessGroup *pg);
    ~Task();
    Task(const Task &) = delete;
    Task &operator=(const Task &) = delete;

    // NCCL task: completion is an event recorded on the comm stream.
    nm_status_t record_on(CUstream s);
    // Staged task: completion is the real MPI's request, then the copy back of `stage`.
    void set_inner(MPI_Request inner, Stage *stage);
    // Hand the user a generalized request standing for this task. Returns an MPI code.
    int publish(MPI_Request *user_req);
    // Non-blocking completion check; completes the generalized request when done.
    bool poll();
    // One line for logs and error messages: "task#12 iallreduce on pg0{...} seq 5, 3.2 ms".
    std::string describe() const;
    MPI_Request greq() const { return greq_; }

  private:
    static int query_fn(void *extra, MPI_Status *status);
    static int free_fn(void *extra);
    static int cancel_fn(void *extra, int complete);
    void complete(int mpi_rc);

    uint64_t id_;
    int fn_, kind_;
    ProcessGroup *pg_;
    uint64_t pg_seq_ = 0;
    CUevent ev_ = nullptr;
    CUcontext ctx_ = nullptr;
    MPI_Request inner_ = MPI_REQUEST_NULL;
    Stage *stage_ = nullptr;
    MPI_Request greq_ = MPI_REQUEST_NULL;
    MPI_Status inner_status_;
    bool has_status_ = false;
    int mpi_rc_ = MPI_SUCCESS;
    double t0_;
    bool done_ = false, freed_ = false;

    friend void tasks_reap();
};

void tasks_progress();
void tasks_reap();
// Wait for every outstanding task (MPI_Finalize).
void tasks_drain();

}  // namespace ncclmpi
#endif
