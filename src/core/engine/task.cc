// ncclmpi: tasks behind generalized requests, their progress, and the Wait forms that drive it.
#include "core/engine/task.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/comm/process_group.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/log.h"

namespace ncclmpi {

static std::recursive_mutex tasks_mu;
static std::vector<Task *> pending;  // published, not yet complete
static std::vector<Task *> retired;  // complete, waiting for the user to free the request
static uint64_t next_task_id;

Task::Task(const nm_op_t *o, ProcessGroup *pg) : id_(++next_task_id), fn_(o->fn), kind_(o->kind), pg_(pg), t0_(nm_now_s())
{
    if (pg) pg_seq_ = pg->seq() + 1;
}

Task::~Task()
{
    if (ev_) {
        DeviceGuard g(ctx_);
        cu.cuEventDestroy(ev_);
    }
    if (stage_) stage_release(stage_);
}

std::string Task::describe() const
{
    char b[256];
    snprintf(b, sizeof(b), "task#%llu %s %s seq %llu, %s, %.3f ms", (unsigned long long)id_, nm_opkind_name(kind_),
             pg_ ? pg_->describe().c_str() : "staged", (unsigned long long)pg_seq_, done_ ? "done" : "pending",
             1e3 * (nm_now_s() - t0_));
    return b;
}

nm_status_t Task::record_on(CUstream s)
{
    if (pg_) pg_->nb_started();
    NM_CU_CHECK(cu.cuCtxGetCurrent(&ctx_), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuEventCreate(&ev_, CU_EVENT_DISABLE_TIMING), return NM_ERR_CUDA);
    NM_CU_CHECK(cu.cuEventRecord(ev_, s), return NM_ERR_CUDA);
    return NM_OK;
}

void Task::set_inner(MPI_Request inner, Stage *stage)
{
    inner_ = inner;
    stage_ = stage;
}

int Task::publish(MPI_Request *user_req)
{
    int rc = PMPI_Grequest_start(query_fn, free_fn, cancel_fn, this, &greq_);
    if (rc != MPI_SUCCESS) return rc;
    *user_req = greq_;
    std::lock_guard<std::recursive_mutex> g(tasks_mu);
    pending.push_back(this);
    __atomic_add_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    NM_DEBUG(CALL, "%s published", describe().c_str());
    return MPI_SUCCESS;
}

void Task::complete(int mpi_rc)
{
    if (pg_ && ev_) pg_->nb_finished();
    mpi_rc_ = mpi_rc;
    done_ = true;
    __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    PMPI_Grequest_complete(greq_);
}

bool Task::poll()
{
    if (done_) return true;
    if (ev_) {
        DeviceGuard g(ctx_);
        CUresult q = cu.cuEventQuery(ev_);
        if (q == CUDA_ERROR_NOT_READY) return false;
        if (q != CUDA_SUCCESS) NM_ERROR(COLL, "%s: %s", describe().c_str(), cuda_errstr(q));
        complete(q == CUDA_SUCCESS ? MPI_SUCCESS : MPI_ERR_OTHER);
        return true;
    }
    int flag = 0;
    int rc = PMPI_Test(&inner_, &flag, &inner_status_);
    if (rc == MPI_SUCCESS && !flag) return false;
    has_status_ = true;
    if (rc == MPI_SUCCESS && stage_) rc = stage_finish(stage_) == NM_OK ? MPI_SUCCESS : MPI_ERR_OTHER;
    complete(rc);
    return true;
}

int Task::query_fn(void *extra, MPI_Status *status)
{
    Task *t = static_cast<Task *>(extra);
    if (t->has_status_) {
        MPI_Count bytes = 0;
        PMPI_Get_elements_x(&t->inner_status_, MPI_BYTE, &bytes);
        status->MPI_SOURCE = t->inner_status_.MPI_SOURCE;
        status->MPI_TAG = t->inner_status_.MPI_TAG;
        PMPI_Status_set_elements_x(status, MPI_BYTE, bytes == MPI_UNDEFINED ? 0 : bytes);
        int cancelled = 0;
        PMPI_Test_cancelled(&t->inner_status_, &cancelled);
        PMPI_Status_set_cancelled(status, cancelled);
    } else {
        status->MPI_SOURCE = MPI_ANY_SOURCE;
        status->MPI_TAG = MPI_ANY_TAG;
        PMPI_Status_set_elements_x(status, MPI_BYTE, 0);
        PMPI_Status_set_cancelled(status, 0);
    }
    status->MPI_ERROR = t->mpi_rc_;
    return t->mpi_rc_;
}

int Task::free_fn(void *extra)
{
    std::lock_guard<std::recursive_mutex> g(tasks_mu);
    static_cast<Task *>(extra)->freed_ = true;
    return MPI_SUCCESS;
}

int Task::cancel_fn(void *extra, int complete)
{
    Task *t = static_cast<Task *>(extra);
    if (!complete && t->inner_ != MPI_REQUEST_NULL) PMPI_Cancel(&t->inner_);
    return MPI_SUCCESS;
}

void tasks_reap()
{
    std::lock_guard<std::recursive_mutex> g(tasks_mu);
    for (size_t i = 0; i < retired.size();) {
        if (retired[i]->freed_) {
            delete retired[i];
            retired[i] = retired.back();
            retired.pop_back();
        } else {
            i++;
        }
    }
}

void tasks_progress()
{
    std::unique_lock<std::recursive_mutex> g(tasks_mu, std::try_to_lock);
    if (!g.owns_lock()) return;  // another thread is progressing
    for (size_t i = 0; i < pending.size();) {
        Task *t = pending[i];
        if (t->poll()) {
            pending.erase(pending.begin() + i);
            retired.push_back(t);
        } else {
            i++;
        }
    }
    if (!retired.empty()) tasks_reap();
}

void tasks_drain()
{
    while (__atomic_load_n(&nm_hot.pending, __ATOMIC_RELAXED)) {
        tasks_progress();
        sched_yield();
    }
    tasks_reap();
}

}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" void nm_progress(void) { tasks_progress(); }

extern "C" int nm_tasks_owns(int n, const MPI_Request *reqs)
{
    std::lock_guard<std::recursive_mutex> g(tasks_mu);
    for (const Task *t : pending)
        for (int i = 0; i < n; i++)
            if (reqs[i] == t->greq()) return 1;
    return 0;
}

// The blocking forms loop over their Test twin, progressing ncclmpi's tasks in between.
template <class Test>
static int wait_loop(Test test)
{
    for (unsigned spin = 0;; spin++) {
        tasks_progress();
        int done = 0;
        int rc = test(&done);
        if (rc != MPI_SUCCESS || done) return rc;
        if ((spin & 255) == 255) sched_yield();
    }
}

extern "C" int nm_wait_wait(MPI_Request *req, MPI_Status *status)
{
    return wait_loop([&](int *d) { return PMPI_Test(req, d, status); });
}

extern "C" int nm_wait_waitall(int n, MPI_Request reqs[], MPI_Status *sts)
{
    return wait_loop([&](int *d) { return PMPI_Testall(n, reqs, d, sts); });
}

extern "C" int nm_wait_waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *st)
{
    return wait_loop([&](int *d) { return PMPI_Testany(n, reqs, idx, d, st); });
}

extern "C" int nm_wait_waitsome(int n, MPI_Request reqs[], int *outc, int idx[], MPI_Status sts[])
{
    return wait_loop([&](int *d) {
        int rc = PMPI_Testsome(n, reqs, outc, idx, sts);
        *d = *outc != 0;
        return rc;
    });
}
