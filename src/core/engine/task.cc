// ncclmpi: tasks behind generalized requests, their progress, and the Wait forms that drive it.
#include "core/engine/task.h"

#include <sched.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <mutex>
#include <vector>

#include "core/comm/comm_state.h"
#include "core/engine/engine.h"
#include "core/nvtx.h"
#include "core/tl/p2p/envelope.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"
#include "util/watchdog.h"

namespace ncclmpi {

static std::recursive_mutex tasks_mu;

// Failed requests not yet reported (by the generalized request's handle). Each holds one count of
// nm_hot.pending, so the Wait and Test wrappers take their slow path until it is reported.
struct Failure {
    MPI_Comm comm;
    int code;
    bool reported;  // the real MPI already called the handler (its own request failed)
};
static std::mutex failed_mu;
static std::unordered_map<MPI_Request, Failure> failed;
static std::atomic<int> nfailed{0};  // its size, read without the lock
// A Wait or Test wrapper copies the handles before the real MPI call (which sets completed ones to
// MPI_REQUEST_NULL), then reports the failures of those it completed. A failure is moved from the
// table into the wrapper when the real MPI frees the request (free_fn, on the wrapper's thread,
// inside its call): once freed, the handle may be given to another thread's new request, whose own
// failure would then take the same key in the table.
class Reporting;
// (initial-exec: the library's TLS is static, as in dtype.cc; one load instead of __tls_get_addr)
static thread_local Reporting *reporting __attribute__((tls_model("initial-exec")));  // the innermost wrapper that reports
class Reporting {
  public:
    Reporting(int n, const MPI_Request *reqs) : n_(n > 0 ? (size_t)n : 0), prev_(reporting)
    {
        if (n_ > sizeof(small_) / sizeof(small_[0])) big_.assign(reqs, reqs + n_);
        else std::copy(reqs, reqs + n_, small_);
        reporting = this;
    }
    ~Reporting()
    {
        reporting = prev_;
        for (size_t i = 0; i < freed_.size(); i++)  // not asked for (the call's statuses were ignored)
            __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    }
    MPI_Request before(int i) const { return data()[i]; }
    bool has(MPI_Request q) const { return std::find(data(), data() + n_, q) != data() + n_; }
    void keep(MPI_Request q, const Failure &f) { freed_.emplace_back(q, f); }
    // The failure of one of this call's requests that the real MPI freed, taken out.
    bool take(MPI_Request q, Failure *f)
    {
        for (size_t i = 0; i < freed_.size(); i++)
            if (freed_[i].first == q) {
                *f = freed_[i].second;
                freed_.erase(freed_.begin() + (long)i);
                __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
                return true;
            }
        return false;
    }

  private:
    const MPI_Request *data() const { return big_.empty() ? small_ : big_.data(); }
    size_t n_;
    MPI_Request small_[8];  // no allocation for the common few
    std::vector<MPI_Request> big_;
    std::vector<std::pair<MPI_Request, Failure>> freed_;  // empty unless a request failed
    Reporting *prev_;
};
static std::vector<Task *> pending;  // published, not yet complete
static std::vector<Task *> retired;  // complete, waiting for the user to free the request
static FreeList<Task> free_tasks;
static std::atomic<uint64_t> next_task_id{0};

// ---- error codes with our message behind MPI_Error_string --------------------------------------
int nm_error_class(nm_status_t st)
{
    switch (st) {
    case NM_ERR_ARG: return MPI_ERR_ARG;
    case NM_ERR_BUFFER: return MPI_ERR_BUFFER;
    case NM_ERR_COUNT: return MPI_ERR_COUNT;
    case NM_ERR_TYPE: return MPI_ERR_TYPE;
    case NM_ERR_ROOT: return MPI_ERR_ROOT;
    case NM_ERR_COMM: return MPI_ERR_COMM;
    case NM_ERR_OP: return MPI_ERR_OP;
    case NM_ERR_NO_MEM: return MPI_ERR_NO_MEM;
    case NM_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case NM_ERR_INTERNAL: return MPI_ERR_INTERN;
    case NM_ERR_TRUNCATE: return MPI_ERR_TRUNCATE;
    default: return MPI_ERR_OTHER;
    }
}

int nm_raise_call(const char *call, int cls, const char *why, MPI_Comm comm, MPI_File fh, MPI_Win win)
{
    char msg[MPI_MAX_ERROR_STRING];
    snprintf(msg, sizeof(msg), "ncclmpi: %s: %s", call, why);
    NM_WARN(CALL, "%s", msg + 9);
    const int code = nm_error_code(cls, msg);
    if (fh != MPI_FILE_NULL) PMPI_File_call_errhandler(fh, code);
    else if (win != MPI_WIN_NULL) PMPI_Win_call_errhandler(win, code);
    else PMPI_Comm_call_errhandler(comm != MPI_COMM_NULL ? comm : MPI_COMM_WORLD, code);
    return code;
}

int nm_raise_error(int fn, nm_status_t st, const char *why, MPI_Comm comm, MPI_File fh)
{
    char call[64], what[MPI_MAX_ERROR_STRING];
    snprintf(call, sizeof(call), "MPI_%s", nm_fn_names[fn]);
    snprintf(what, sizeof(what), "%s (%s)", why, nm_status_str(st));
    return nm_raise_call(call, nm_error_class(st), what, comm, fh);
}

int nm_error_code(int cls, const char *msg)
{
    static std::mutex mu;
    static std::map<std::string, int> codes;
    std::lock_guard<std::mutex> g(mu);
    auto it = codes.find(msg);
    if (it != codes.end()) return it->second;
    int code = cls;
    if (PMPI_Add_error_code(cls, &code) == MPI_SUCCESS && PMPI_Add_error_string(code, msg) == MPI_SUCCESS) {
        codes[msg] = code;
        return code;
    }
    return cls;
}

// ---- tasks -------------------------------------------------------------------------------------
Task *Task::get(const nm_op_t *o)
{
    Task *t = free_tasks.get();
    t->id_ = next_task_id.fetch_add(1, std::memory_order_relaxed) + 1;
    t->fn_ = o->fn;
    t->kind_ = o->kind;
    t->comm_ = o->comm;
    t->t0_ = nm_now_s();
    return t;
}

void Task::recycle()
{
    if (stage_) stage_release(stage_);
    decode_free(decode_);
    decode_ = nullptr;
    fn_ = kind_ = 0;
    comm_ = MPI_COMM_NULL;
    op_ = nullptr;
    inner_ = greq_ = MPI_REQUEST_NULL;
    if (send_ != MPI_REQUEST_NULL) PMPI_Request_free(&send_);  // (only where its task failed first)
    send_copy_.clear();
    send_rc_ = MPI_SUCCESS;
    stage_ = nullptr;
    group_.clear();
    is_group_ = false;
    group_rc_ = MPI_SUCCESS;
    has_status_ = false;
    inner_failed_ = false;
    copying_ = false;
    deferred_.store(false, std::memory_order_relaxed);
    copy_pool_ = copy_slot_ = -1;
    mpi_rc_ = MPI_SUCCESS;
    why_.clear();
    failed_.store(NM_OK, std::memory_order_relaxed);
    t0_ = 0;
    done_ = freed_ = false;
    free_tasks.put(this);
}

std::string Task::describe() const
{
    char b[320];
    snprintf(b, sizeof(b), "task#%llu MPI_%s %s, %s, %.3f ms", (unsigned long long)id_, nm_fn_names[fn_],
             op_ ? op_->describe().c_str() : "staged", done_ ? "done" : "pending", 1e3 * (nm_now_s() - t0_));
    return b;
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
    MtLock<std::recursive_mutex> g(tasks_mu);
    pending.push_back(this);
    __atomic_add_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    NM_DEBUG(CALL, "%s published", describe().c_str());
    return MPI_SUCCESS;
}

void Task::sent(MPI_Request inner, nm_status_t st, const char *why)
{
    inner_ = inner;
    if (st != NM_OK) fail_op(st, why);
    deferred_.store(false, std::memory_order_release);  // a polling thread reads inner_ after this
}

void Task::fail_op(nm_status_t st, const std::string &why)
{
    why_ = why;
    failed_.store(st, std::memory_order_release);  // a polling thread reads why_ after this
}

void Task::complete(int mpi_rc)
{
    mpi_rc_ = mpi_rc;
    done_ = true;
    if (mpi_rc != MPI_SUCCESS) {  // reported by the wrapper that completes the request; its count stays
        std::lock_guard<std::mutex> g(failed_mu);
        failed[greq_] = Failure{comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, mpi_rc, inner_failed_};
        nfailed.store((int)failed.size(), std::memory_order_release);
    } else {
        __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    }
    PMPI_Grequest_complete(greq_);
}

// The failure of a request, taken out of the table (its count of nm_hot.pending with it unless
// `keep`: then it goes on into the wrapper that completes it).
static bool take_failure(MPI_Request before, Failure *f, bool keep = false)
{
    if (before == MPI_REQUEST_NULL || nfailed.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> g(failed_mu);
    auto it = failed.find(before);
    if (it == failed.end()) return false;
    *f = it->second;
    failed.erase(it);
    nfailed.store((int)failed.size(), std::memory_order_release);
    if (!keep) __atomic_sub_fetch(&nm_hot.pending, 1, __ATOMIC_RELAXED);
    return true;
}

bool task_take_failure(MPI_Request req, int *code, bool *reported)
{
    Failure f;
    if (!take_failure(req, &f)) return false;
    *code = f.code;
    *reported = f.reported;
    return true;
}

// The status MPI gives an empty (null or inactive) request: any source and tag, nothing received,
// not cancelled. MPI_ERROR is left to the caller.
static void set_empty_status(MPI_Status *st)
{
    st->MPI_SOURCE = MPI_ANY_SOURCE;
    st->MPI_TAG = MPI_ANY_TAG;
    PMPI_Status_set_elements_x(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
}

static const RequestTable *above;  // (set once, when the library loads)
void tasks_set_request_table(const RequestTable *t) { above = t; }

bool own_request_done(MPI_Request *r, MPI_Status *st, int *err, bool *reported)
{
    *err = MPI_SUCCESS;
    *reported = false;
    int flag = 0;
    if (*r == MPI_REQUEST_NULL) {
        set_empty_status(st);
        return true;
    }
    PMPI_Request_get_status(*r, &flag, st);
    if (!flag) return false;
    // a task's failure is taken before its request is freed, which would drop it
    task_take_failure(*r, err, reported);
    const int rc = PMPI_Wait(r, st);
    if (rc != MPI_SUCCESS && *err == MPI_SUCCESS) {  // the real MPI's own request: its handler saw it
        *err = rc;
        *reported = true;
    }
    return true;
}

// The failure of a request that wrapper `r` just completed (its handle before the call).
static bool take_failure(Reporting &r, MPI_Request before, Failure *f)
{
    return r.take(before, f) || take_failure(before, f);
}

bool Task::poll(uint64_t sweep)
{
    if (done_) return true;
    if (op_) {
        nm_status_t st = (nm_status_t)failed_.load(std::memory_order_acquire);
        std::string why;
        if (st != NM_OK) why = why_;
        else if (!op_poll(op_, &st, &why, sweep)) return false;
        std::string what;
        if (st != NM_OK) what = op_->describe();
        op_finish(op_, st != NM_OK);
        op_ = nullptr;
        if (st == NM_OK) {
            complete(MPI_SUCCESS);
        } else {
            char msg[MPI_MAX_ERROR_STRING];
            snprintf(msg, sizeof(msg), "ncclmpi: %s: %s (%s)", what.c_str(), why.c_str(), nm_status_str(st));
            NM_ERROR(COLL, "%s", msg + 9);
            complete(nm_error_code(nm_error_class(st), msg));
        }
        return true;
    }
    if (is_group_) {
        bool left = false;
        for (MPI_Request &r : group_) {
            MPI_Status st;
            int err;
            bool reported;
            if (!own_request_done(&r, &st, &err, &reported)) left = true;
            else if (err != MPI_SUCCESS && group_rc_ == MPI_SUCCESS) group_rc_ = err;
        }
        if (left) return false;
        complete(group_rc_);
        return true;
    }
    auto stage_rc = [](nm_status_t st) { return st == NM_OK ? MPI_SUCCESS : nm_error_class(st); };
    if (deferred_.load(std::memory_order_acquire)) return false;  // not sent yet (the next flush sends it)
    if (copy_slot_ >= 0) {  // its payload's copy into the envelope pool, which may still read the buffer
        const nm_status_t st = env_copy_poll(copy_pool_, copy_slot_, sweep);
        if (st == NM_INPROGRESS) return false;
        env_copy_drop(copy_pool_, copy_slot_);
        copy_slot_ = -1;
        if (st != NM_OK) fail_op(st, "the copy of the payload into the send pool failed");
    }
    if (const nm_status_t st = (nm_status_t)failed_.load(std::memory_order_acquire)) {  // never sent
        char msg[MPI_MAX_ERROR_STRING];
        snprintf(msg, sizeof(msg), "ncclmpi: %s: %s (%s)", describe().c_str(), why_.c_str(), nm_status_str(st));
        NM_ERROR(CALL, "%s", msg + 9);
        complete(nm_error_code(nm_error_class(st), msg));
        return true;
    }
    if (copying_) {  // the copy back is under way (the copies of every task polled overlap)
        const nm_status_t st = stage_finish_poll(stage_, false, sweep);
        if (st == NM_INPROGRESS) return false;
        copying_ = false;
        complete(stage_rc(st));
        return true;
    }
    int flag = 0;
    if (send_ != MPI_REQUEST_NULL) {  // (set_send: the send first)
        const int src = PMPI_Test(&send_, &flag, MPI_STATUS_IGNORE);
        if (src == MPI_SUCCESS && !flag) return false;
        send_rc_ = src;
        send_ = MPI_REQUEST_NULL;
        send_copy_.clear();
    }
    int rc = PMPI_Test(&inner_, &flag, &inner_status_);
    if (rc == MPI_SUCCESS && !flag) return false;
    if (rc == MPI_SUCCESS && send_rc_ != MPI_SUCCESS) {  // the send failed (its Test called the handler)
        rc = send_rc_;
        inner_failed_ = true;
        has_status_ = true;
        complete(rc);
        return true;
    }
    inner_failed_ = rc != MPI_SUCCESS;  // the real MPI's Test called the handler for it
    has_status_ = true;
    int cancelled = 0;  // a cancelled receive wrote nothing: nothing goes back
    if (rc == MPI_SUCCESS && may_cancel()) PMPI_Test_cancelled(&inner_status_, &cancelled);
    if (rc == MPI_SUCCESS && stage_ && !cancelled) {
        const nm_status_t st = stage_finish_begin(stage_, &inner_status_);
        if (st == NM_INPROGRESS) {
            copying_ = true;
            return false;
        }
        rc = stage_rc(st);
    }
    if (rc == MPI_SUCCESS && decode_ && !cancelled) rc = env_finish(*decode_, &inner_status_);
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
        if (t->may_cancel()) PMPI_Test_cancelled(&t->inner_status_, &cancelled);
        PMPI_Status_set_cancelled(status, cancelled);
    } else {
        set_empty_status(status);
    }
    status->MPI_ERROR = MPI_SUCCESS;  // a failure is reported by the wrapper (see task.h)
    return MPI_SUCCESS;
}

int Task::free_fn(void *extra)
{
    Task *t = static_cast<Task *>(extra);
    if (t->mpi_rc_ != MPI_SUCCESS) {
        // freed by the wrapper completing it: the failure goes with it; by anything else
        // (MPI_Request_free): nobody will ask
        Failure f;
        const bool mine = reporting && reporting->has(t->greq_);
        if (take_failure(t->greq_, &f, mine) && mine) reporting->keep(t->greq_, f);
    }
    MtLock<std::recursive_mutex> g(tasks_mu);
    t->freed_ = true;
    return MPI_SUCCESS;
}

int Task::cancel_fn(void *extra, int complete)
{
    Task *t = static_cast<Task *>(extra);
    if (!complete && t->inner_ != MPI_REQUEST_NULL) PMPI_Cancel(&t->inner_);
    if (!complete && t->send_ != MPI_REQUEST_NULL) PMPI_Cancel(&t->send_);  // (set_send)
    return MPI_SUCCESS;
}

void tasks_reap()
{
    MtLock<std::recursive_mutex> g(tasks_mu);
    for (size_t i = 0; i < retired.size();) {
        if (retired[i]->freed_) {
            retired[i]->recycle();
            retired[i] = retired.back();
            retired.pop_back();
        } else {
            i++;
        }
    }
}

static std::atomic<uint64_t> sweeps{0};

void tasks_progress()
{
    engine_progress();
    std::unique_lock<std::recursive_mutex> g(tasks_mu, std::defer_lock);
    if (nm_thread_multiple && !g.try_lock()) return;  // another thread is progressing
    const uint64_t sweep = sweeps.fetch_add(1, std::memory_order_relaxed) + 1;
    env_releases_hold(true);  // (the payloads this sweep's receives pulled: one release per sender)
    size_t keep = 0;  // the pending ones stay in issue order
    for (size_t i = 0; i < pending.size(); i++) {
        Task *t = pending[i];
        if (t->poll(sweep)) retired.push_back(t);
        else pending[keep++] = t;
    }
    pending.resize(keep);
    if (env_on()) stage_pulls_issue();  // the envelope payloads this sweep pulls, in one launch
    if (!retired.empty()) tasks_reap();
    if (above) above->progress();
    env_releases_hold(false);
    env_progress();
}

static bool tasks_left()
{
    MtLock<std::recursive_mutex> g(tasks_mu);
    return !pending.empty();
}

void tasks_drain()
{
    engine_flush_all();
    while (tasks_left()) {  // not nm_hot.pending: it also counts failures nobody asked for
        tasks_progress();
        mpi_progress();
        sched_yield();
    }
    tasks_reap();
    if (above) above->drain();
}

// The tasks of these requests whose ops are still queued; by communicator, the highest sequence.
static std::vector<std::pair<CommState *, uint64_t>> queued_of(int n, const MPI_Request *reqs)
{
    std::vector<std::pair<CommState *, uint64_t>> v;
    std::vector<MPI_Request> sorted(reqs, reqs + n);  // a lookup per pending task, not a scan
    std::sort(sorted.begin(), sorted.end());
    MtLock<std::recursive_mutex> g(tasks_mu);
    for (const Task *t : pending) {
        Op *op = t->op();
        if (!op || op->is_launched() || !std::binary_search(sorted.begin(), sorted.end(), t->greq())) continue;
        auto it = std::find_if(v.begin(), v.end(), [&](const std::pair<CommState *, uint64_t> &e) { return e.first == op->cs; });
        if (it == v.end()) {
            op->cs->refs.fetch_add(1, std::memory_order_relaxed);  // released by the caller
            v.emplace_back(op->cs, op->seq);
        } else {
            it->second = std::max(it->second, op->seq);
        }
    }
    return v;
}

}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" void nm_progress(void)
{
    if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) engine_flush_all();
    tasks_progress();
}

extern "C" void nm_flush(void)
{
    if (__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) engine_flush_all();
}

extern "C" void nm_flush_fn(int fn)
{
    nm_trace_call(fn);
    nm_flush();
}

extern "C" void nm_progress_fn(int fn)
{
    nm_trace_call(fn);
    nm_progress();
}

extern "C" int nm_tasks_owns(int n, const MPI_Request *reqs)
{
    if (above && above->owns(n, reqs)) return 1;
    {
        MtLock<std::recursive_mutex> g(tasks_mu);
        for (const Task *t : pending)
            for (int i = 0; i < n; i++)
                if (reqs[i] == t->greq()) return 1;
    }
    if (nfailed.load(std::memory_order_acquire) == 0) return 0;
    std::lock_guard<std::mutex> g(failed_mu);
    for (int i = 0; i < n; i++)
        if (failed.count(reqs[i])) return 1;
    return 0;
}

// Before a wait: the queued ops it needs are flushed in groups agreed with the other ranks
// (all = the call completes only when all its requests do; else their groups are singletons).
static void flush_for_wait(int n, const MPI_Request *reqs, bool all)
{
    if (!__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) return;
    auto v = queued_of(n, reqs);
    // a round is awaited on one communicator only (waiting on two, a rank could wait on one
    // while a peer waits on the other); engine_flush_waitable proposes every other queue first
    if (all && v.size() == 1) engine_flush_waitable(v[0].first, v[0].second);
    engine_flush_all();
    for (auto &e : v) comm_release(e.first);
}

// Waiting inside an explicit group on one of its operations would never return (it starts at
// ncclmpi_group_end): an error instead.
static int open_group_error(int n, const MPI_Request *reqs, const char *call)
{
    if (engine_group_depth() == 0) return MPI_SUCCESS;
    MtLock<std::recursive_mutex> g(tasks_mu);
    for (const Task *t : pending) {
        Op *op = t->op();
        if (!op || !op->explicit_group || op->is_launched()) continue;
        for (int i = 0; i < n; i++)
            if (reqs[i] == t->greq()) {
                char msg[MPI_MAX_ERROR_STRING];
                snprintf(msg, sizeof(msg), "ncclmpi: MPI_%s: %s belongs to an open ncclmpi_group_begin/end group; it "
                         "starts at ncclmpi_group_end", call, op->describe().c_str());
                int code = nm_error_code(MPI_ERR_REQUEST, msg);
                PMPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
                return code;
            }
    }
    return MPI_SUCCESS;
}

// Whether one of reqs[0..n) is a device operation of ncclmpi's still pending (a task).
static bool any_task(int n, const MPI_Request *reqs)
{
    MtLock<std::recursive_mutex> g(tasks_mu);
    for (const Task *t : pending)
        for (int i = 0; i < n; i++)
            if (reqs[i] != MPI_REQUEST_NULL && reqs[i] == t->greq()) return true;
    return false;
}

// The blocking forms loop over their Test twin, progressing ncclmpi's tasks in between.
// (call: the MPI function, for the watchdog's warning when the wait lasts; a wait that ends in
// its first 256 tests is not marked. A wait for one of ncclmpi's device operations (reqs: the
// requests, or null) is marked fatal under NCCLMPI_TIMEOUT: a staged one waits in the real MPI's
// request, which nothing ends; an NCCL one fails at the timeout, before the watchdog's 1.5 T + 1 s.)
template <class Test>
static int wait_loop(const char *call, Test test, int n = 0, const MPI_Request *reqs = nullptr)
{
    bool watched = false;
    int rc;
    for (unsigned spin = 0;; spin++) {
        tasks_progress();
        int done = 0;
        rc = test(&done);
        if (rc != MPI_SUCCESS || done) break;
        if ((spin & 255) == 255) {
            if (!watched) {
                if (nm_cfg.TIMEOUT > 0 && reqs && any_task(n, reqs)) nm_wd_begin_fatal(call, "for its device requests", -1);
                else nm_wd_begin(call, "for its requests");
            }
            watched = true;
            sched_yield();
        }
    }
    if (watched) nm_wd_end();
    return rc;
}

int ncclmpi::own_requests_wait(int n, MPI_Request *r, const char *call)
{
    nm_flush();  // (queued sends among them go now)
    int first = MPI_SUCCESS;
    wait_loop(call, [&](int *done) {
        *done = 1;
        for (int i = 0; i < n; i++) {
            MPI_Status st;
            int err;
            bool reported;
            if (r[i] == MPI_REQUEST_NULL) continue;
            if (!own_request_done(&r[i], &st, &err, &reported)) *done = 0;
            else if (err != MPI_SUCCESS && first == MPI_SUCCESS) first = err;
        }
        return MPI_SUCCESS;
    });
    return first;
}

// ---- failures of ncclmpi's requests, through the communicator's error handler --------------
// (Reporting, at the top, holds the handles a wrapper is completing)

// One request completed (index i of the call's array): its failure, if any, as the call's result.
static int report_one(Reporting &r, int i, MPI_Status *st, int rc)
{
    Failure f;
    if (rc != MPI_SUCCESS || i < 0 || !take_failure(r, r.before(i), &f)) return rc;
    if (st != MPI_STATUS_IGNORE) st->MPI_ERROR = f.code;
    if (!f.reported) PMPI_Comm_call_errhandler(f.comm, f.code);
    return f.code;
}

// Several completed (idx[k] for k < m, or all n when idx is null): MPI_ERR_IN_STATUS when one
// failed, each status's MPI_ERROR set, the first failure's communicator's handler called.
// (rc MPI_ERR_IN_STATUS: another request failed; those the call left pending keep their failures
// for a later call, and where statuses are ignored, which ones completed is not known)
static int report_many(Reporting &r, int m, const int *idx, MPI_Status *sts, int rc)
{
    const bool in_status = rc == MPI_ERR_IN_STATUS;
    if ((rc != MPI_SUCCESS && !in_status) || m == MPI_UNDEFINED || (in_status && sts == MPI_STATUSES_IGNORE)) return rc;
    MPI_Comm first = MPI_COMM_NULL;
    bool any_bad = false;
    for (int k = 0; k < m; k++) {
        if (in_status && sts[k].MPI_ERROR == MPI_ERR_PENDING) continue;
        Failure f;
        const bool bad = take_failure(r, r.before(idx ? idx[k] : k), &f);
        if (bad && first == MPI_COMM_NULL && !f.reported) first = f.comm;
        any_bad |= bad;
        if (sts != MPI_STATUSES_IGNORE && (bad || !in_status)) sts[k].MPI_ERROR = bad ? f.code : MPI_SUCCESS;
    }
    if (!any_bad) return rc;
    if (first != MPI_COMM_NULL) PMPI_Comm_call_errhandler(first, MPI_ERR_IN_STATUS);
    return MPI_ERR_IN_STATUS;
}

// Requests of persistent.h's table among a completion call's (staged persistent requests, host
// receives that may get an envelope): statuses of our own where the caller ignores them (a receive
// gets back the bytes its status counts; a decoding needs the message's size); done() runs the
// copies back and the decodings of the completed ones, by their handles before the call (the
// Reporting's): m of them at indices idx (all when idx is null); a failed one becomes the call's
// error (in a form that completes several, MPI_ERR_IN_STATUS, the code in its status).
class PersScope {
  public:
    PersScope(const Reporting &r, int n, const MPI_Request *reqs, bool many)
        : r_(r), n_(n), after_(reqs), any_(above && above->owns(n, reqs)), many_(many)
    {
    }
    MPI_Status *statuses(MPI_Status *user, int n)
    {
        if (!any_ || (user != MPI_STATUSES_IGNORE && user != MPI_STATUS_IGNORE)) return user;
        if (n <= (int)(sizeof(small_) / sizeof(small_[0]))) return small_;
        own_.resize(n);
        return own_.data();
    }
    int done(int rc, int m, const int *idx, MPI_Status *sts)
    {
        if (!any_ || m == MPI_UNDEFINED) return rc;
        const bool call_failed = rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS;
        int first = MPI_SUCCESS;
        for (int k = 0; k < m; k++) {
            const int i = idx ? idx[k] : k;
            if (i < 0 || i >= n_) continue;
            const bool failed = call_failed || (rc == MPI_ERR_IN_STATUS && sts[k].MPI_ERROR != MPI_SUCCESS);
            const int e = above->completed(r_.before(i), failed ? nullptr : &sts[k], after_[i] == MPI_REQUEST_NULL);
            if (many_ && !failed) sts[k].MPI_ERROR = e;  // (read only when the call fails)
            if (first == MPI_SUCCESS) first = e;
        }
        if (first == MPI_SUCCESS || rc != MPI_SUCCESS) return rc;
        return many_ ? MPI_ERR_IN_STATUS : first;
    }

  private:
    const Reporting &r_;
    int n_;
    const MPI_Request *after_;  // the caller's array, as the real MPI left it
    bool any_;
    bool many_;  // MPI_Waitall/some, MPI_Testall/some
    MPI_Status small_[8];
    std::vector<MPI_Status> own_;
};

extern "C" int nm_wait_wait(MPI_Request *req, MPI_Status *status)
{
    if (int e = open_group_error(1, req, "Wait")) return e;
    NvtxStage sg_flush(stage::kFlush);
    flush_for_wait(1, req, true);
    sg_flush.end();
    NvtxStage sg_wait(stage::kWait);
    Reporting r(1, req);
    PersScope ps(r, 1, req, false);
    MPI_Status *st = ps.statuses(status, 1);
    int rc = wait_loop("Wait", [&](int *d) { return PMPI_Test(req, d, st); }, 1, req);
    return report_one(r, 0, status, ps.done(rc, 1, nullptr, st));
}

#ifdef MPICH
// MPICH 5.0.2's MPI_Testall over partitioned requests fails (MPI_ERR_IN_STATUS through the error
// handler, no status holding an error) while their transfer is under way, where MPI_Test on each
// does not (design.md, "MPICH"): under MPICH, MPI_Waitall tests the requests one by one, each
// once it is complete no more (an inactive persistent request would test again as empty). A
// failed one ends the wait: MPI_ERR_IN_STATUS, the others' statuses MPI_ERR_PENDING.
class TestEach {
  public:
    TestEach(int n, MPI_Request *reqs, MPI_Status *st) : n_(n), reqs_(reqs), st_(st), done_((size_t)n) {}
    int operator()(int *all)
    {
        *all = 1;
        for (int i = 0; i < n_; i++) {
            if (done_[(size_t)i]) continue;
            MPI_Status one;
            MPI_Status *s = st_ == MPI_STATUSES_IGNORE ? &one : &st_[i];
            int f = 1, rc = MPI_SUCCESS;
            if (reqs_[i] == MPI_REQUEST_NULL) {
                set_empty_status(s);
                s->MPI_ERROR = MPI_SUCCESS;
            } else {
                rc = PMPI_Test(&reqs_[i], &f, s);
            }
            if (rc != MPI_SUCCESS) {
                s->MPI_ERROR = rc;
                for (int k = 0; k < n_; k++)
                    if (k != i && !done_[(size_t)k] && st_ != MPI_STATUSES_IGNORE) st_[k].MPI_ERROR = MPI_ERR_PENDING;
                return MPI_ERR_IN_STATUS;
            }
            if (f) done_[(size_t)i] = 1;
            else *all = 0;
        }
        return MPI_SUCCESS;
    }

  private:
    int n_;
    MPI_Request *reqs_;
    MPI_Status *st_;
    std::vector<char> done_;
};
#endif

extern "C" int nm_wait_waitall(int n, MPI_Request reqs[], MPI_Status *sts)
{
    if (int e = open_group_error(n, reqs, "Waitall")) return e;
    NvtxStage sg_flush(stage::kFlush);
    flush_for_wait(n, reqs, true);
    sg_flush.end();
    NvtxStage sg_wait(stage::kWait);
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, true);
    MPI_Status *st = ps.statuses(sts, n);
#ifdef MPICH
    int rc = wait_loop("Waitall", TestEach(n, reqs, st), n, reqs);
#else
    int rc = wait_loop("Waitall", [&](int *d) { return PMPI_Testall(n, reqs, d, st); }, n, reqs);
#endif
    return report_many(r, n, nullptr, st, ps.done(rc, n, nullptr, st));
}

extern "C" int nm_wait_waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *status)
{
    if (int e = open_group_error(n, reqs, "Waitany")) return e;
    flush_for_wait(n, reqs, false);
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, false);
    MPI_Status *st = ps.statuses(status, 1);
    int rc = wait_loop("Waitany", [&](int *d) { return PMPI_Testany(n, reqs, idx, d, st); }, n, reqs);
    if (*idx != MPI_UNDEFINED) rc = ps.done(rc, 1, idx, st);
    return report_one(r, *idx == MPI_UNDEFINED ? -1 : *idx, status, rc);
}

extern "C" int nm_wait_waitsome(int n, MPI_Request reqs[], int *outc, int idx[], MPI_Status sts[])
{
    if (int e = open_group_error(n, reqs, "Waitsome")) return e;
    flush_for_wait(n, reqs, false);
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, true);
    MPI_Status *st = ps.statuses(sts, n);
    int rc = wait_loop("Waitsome", [&](int *d) {
        int rc = PMPI_Testsome(n, reqs, outc, idx, st);
        *d = *outc != 0;
        return rc;
    }, n, reqs);
    return report_many(r, *outc, idx, st, ps.done(rc, *outc, idx, st));
}

// The Test forms: progress ncclmpi's tasks once, test, report.
extern "C" int nm_wait_test(MPI_Request *req, int *flag, MPI_Status *status)
{
    if (int e = open_group_error(1, req, "Test")) return e;
    nm_progress();
    Reporting r(1, req);
    PersScope ps(r, 1, req, false);
    MPI_Status *st = ps.statuses(status, 1);
    int rc = PMPI_Test(req, flag, st);
    return *flag ? report_one(r, 0, status, ps.done(rc, 1, nullptr, st)) : rc;
}

extern "C" int nm_wait_testall(int n, MPI_Request reqs[], int *flag, MPI_Status *sts)
{
    if (int e = open_group_error(n, reqs, "Testall")) return e;
    nm_progress();
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, true);
    MPI_Status *st = ps.statuses(sts, n);
    int rc = PMPI_Testall(n, reqs, flag, st);
    return *flag ? report_many(r, n, nullptr, st, ps.done(rc, n, nullptr, st)) : rc;
}

extern "C" int nm_wait_testany(int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *status)
{
    if (int e = open_group_error(n, reqs, "Testany")) return e;
    nm_progress();
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, false);
    MPI_Status *st = ps.statuses(status, 1);
    int rc = PMPI_Testany(n, reqs, idx, flag, st);
    return *flag && *idx != MPI_UNDEFINED ? report_one(r, *idx, status, ps.done(rc, 1, idx, st)) : rc;
}

extern "C" int nm_wait_testsome(int n, MPI_Request reqs[], int *outc, int idx[], MPI_Status sts[])
{
    if (int e = open_group_error(n, reqs, "Testsome")) return e;
    nm_progress();
    Reporting r(n, reqs);
    PersScope ps(r, n, reqs, true);
    MPI_Status *st = ps.statuses(sts, n);
    int rc = PMPI_Testsome(n, reqs, outc, idx, st);
    return report_many(r, *outc, idx, st, ps.done(rc, *outc, idx, st));
}
