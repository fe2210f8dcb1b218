// ncclmpi: persistent point-to-point requests on device buffers, staged (see persistent.h).
#include "core/tl/staged/persistent.h"

#include <sched.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine/task.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/log.h"

namespace ncclmpi {

namespace {

struct Pers {
    Stage *stage;
    MPI_Comm comm;  // whose error handler reports a failed copy
    bool active;    // started, not yet completed by a Wait or Test
    bool copied;    // this activation's copy back is done (MPI_Request_get_status did it)
};

std::mutex mu;
std::unordered_map<MPI_Request, Pers> table;
std::atomic<int> registered{0};  // table's size, read without the lock (most calls find none)
// freed while active: the real MPI's request (not freed yet, so that it can be tested) and stage
std::vector<std::pair<MPI_Request, Pers>> detached;

int copy_back(const Pers &p, MPI_Status *st)
{
    int cancelled = 0;
    if (st && st != MPI_STATUS_IGNORE) PMPI_Test_cancelled(st, &cancelled);
    if (cancelled || !stage_has_out(p.stage)) return MPI_SUCCESS;
    if (stage_finish(p.stage, st) == NM_OK) return MPI_SUCCESS;
    const char *msg = "ncclmpi: a persistent receive on device memory: the copy back to the device failed";
    NM_ERROR(STAGE, "%s", msg + 9);
    int code = nm_error_code(MPI_ERR_INTERN, msg);
    PMPI_Comm_call_errhandler(p.comm, code);
    return code;
}

void release(Pers &p)
{
    stage_release(p.stage);
    __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
}

}  // namespace

void pers_register(MPI_Request req, Stage *s, MPI_Comm comm)
{
    std::lock_guard<std::mutex> g(mu);
    table[req] = Pers{s, comm, false, false};
    registered.store((int)table.size(), std::memory_order_release);
    // the Start, Wait and Test wrappers take their slow path while one exists
    __atomic_add_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
}

bool pers_owns(int n, const MPI_Request *reqs)
{
    if (registered.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> g(mu);
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL && table.count(reqs[i])) return true;
    return false;
}

int pers_start(int n, const MPI_Request *reqs)
{
    for (int i = 0; i < n; i++) {
        Stage *s = nullptr;
        {
            std::lock_guard<std::mutex> g(mu);
            auto it = table.find(reqs[i]);
            if (it == table.end()) continue;
            it->second.active = true;
            it->second.copied = false;
            s = it->second.stage;
        }
        if (stage_copy_in(s) != NM_OK) {
            const char *msg = "ncclmpi: MPI_Start: the copy of a persistent send's device buffer to the host failed";
            NM_ERROR(STAGE, "%s", msg + 9);
            return nm_error_code(MPI_ERR_INTERN, msg);
        }
    }
    return MPI_SUCCESS;
}

int pers_completed(MPI_Request req, MPI_Status *st)
{
    Pers p;
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = table.find(req);
        if (it == table.end() || !it->second.active) return MPI_SUCCESS;
        it->second.active = false;
        if (it->second.copied) return MPI_SUCCESS;
        p = it->second;
    }
    return copy_back(p, st);
}

int pers_free(MPI_Request *req, int *rc)
{
    std::unique_lock<std::mutex> g(mu);
    auto it = table.find(*req);
    if (it == table.end()) return 0;
    Pers p = it->second;
    table.erase(it);
    registered.store((int)table.size(), std::memory_order_release);
    if (p.active) {  // completes in the background: tested by pers_progress, then freed
        detached.emplace_back(*req, p);
        *req = MPI_REQUEST_NULL;
        *rc = MPI_SUCCESS;
        return 1;
    }
    g.unlock();
    *rc = PMPI_Request_free(req);
    release(p);
    return 1;
}

void pers_progress()
{
    struct Done {
        MPI_Request req;
        Pers p;
        MPI_Status st;
    };
    std::vector<Done> done;
    {
        std::unique_lock<std::mutex> g(mu, std::try_to_lock);
        if (!g.owns_lock() || detached.empty()) return;
        for (size_t i = 0; i < detached.size();) {
            int flag = 0;
            MPI_Status st;
            PMPI_Test(&detached[i].first, &flag, &st);
            if (flag) {
                done.push_back(Done{detached[i].first, detached[i].second, st});
                detached[i] = detached.back();
                detached.pop_back();
            } else {
                i++;
            }
        }
    }
    for (auto &d : done) {  // outside the lock: the copy waits for the GPU
        if (!d.p.copied) copy_back(d.p, &d.st);
        PMPI_Request_free(&d.req);
        release(d.p);
    }
}

void pers_drain()
{
    // a receive freed while active whose message never comes would hold MPI_Finalize for good:
    // it gets a few seconds, then a warning
    const double t0 = nm_now_s();
    for (;;) {
        size_t left;
        {
            std::lock_guard<std::mutex> g(mu);
            left = detached.size();
        }
        if (!left) return;
        if (nm_now_s() - t0 > 5.0) {
            NM_WARN(STAGE, "MPI_Finalize: %zu persistent request(s) on device buffers, freed while active, never "
                    "completed; their data is not copied back", left);
            return;
        }
        pers_progress();
        sched_yield();
    }
}

}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" int nm_pers_start(MPI_Request *request, int *rc) { return nm_pers_startall(1, request, rc); }

extern "C" int nm_pers_startall(int count, MPI_Request reqs[], int *rc)
{
    nm_flush();  // a start may be waited on: nothing stays queued behind it
    if (count <= 0 || !reqs) return 0;
    int e = pers_start(count, reqs);
    if (e == MPI_SUCCESS) return 0;  // the wrapper starts them
    PMPI_Comm_call_errhandler(MPI_COMM_WORLD, e);
    *rc = e;
    return 1;
}

extern "C" int nm_pers_request_free(MPI_Request *request, int *rc)
{
    nm_flush();
    return request && pers_free(request, rc);
}

extern "C" int nm_pers_request_get_status(MPI_Request request, int *flag, MPI_Status *status, int *rc)
{
    nm_progress();
    if (!pers_owns(1, &request)) return 0;
    MPI_Status own, *st = status == MPI_STATUS_IGNORE ? &own : status;
    *rc = PMPI_Request_get_status(request, flag, st);
    if (*rc != MPI_SUCCESS || !*flag) return 1;
    // complete, still active: the data is the application's now, so it is copied back now (once)
    Pers p;
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = table.find(request);
        if (it == table.end() || !it->second.active || it->second.copied) return 1;
        it->second.copied = true;
        p = it->second;
    }
    *rc = copy_back(p, st);
    return 1;
}
