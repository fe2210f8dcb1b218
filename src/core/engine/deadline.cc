// ncclmpi: NCCLMPI_TIMEOUT's deadline and ncclmpi's own agreements waited for under it
// (deadline.h).
#include "core/engine/deadline.h"

#include <sched.h>
#include <string.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "util/watchdog.h"

namespace ncclmpi {

const char kPeersCause[] =
    "ranks may have passed different kinds of memory (see NCCLMPI_AGREE), or a rank is gone or not calling it";

std::string Deadline::expired(const std::string &what, const char *cause)
{
    char b[160];
    snprintf(b, sizeof(b), " did not complete in %ld s (NCCLMPI_TIMEOUT): ", nm_cfg.TIMEOUT);
    return what + b + (cause ? cause : kPeersCause);
}

std::string deadline_message(const char *what, const std::string &desc)
{
    const char *call = nullptr, *where = nullptr;
    nm_wd_current(&call, &where);
    std::string w = what ? what : where ? where : "an agreement with the other ranks";
    return Deadline::expired(desc + ": " + w);
}

// ---- agreements that ran out: their requests and buffers, released once they complete ------
namespace {
struct Left {
    MPI_Request req;
    std::unique_ptr<char[]> buf;
};
std::mutex left_mu;
std::vector<Left> left;
std::atomic<int> nleft{0};
}  // namespace

void deadline_progress()
{
    if (!nleft.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> g(left_mu, std::try_to_lock);
    for (size_t i = 0; g.owns_lock() && i < left.size();) {
        int flag = 0;
        PMPI_Test(&left[i].req, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            i++;
            continue;
        }
        left[i] = std::move(left.back());
        left.pop_back();
        nleft.fetch_sub(1, std::memory_order_relaxed);
    }
}

// Wait for r (started at d), the real MPI progressing; on a timeout r and buf go to `left`.
static nm_status_t wait_agreement(MPI_Request *r, std::unique_ptr<char[]> &buf, const Deadline &d, const char *what,
                                  const std::string &desc, std::string *err)
{
    for (unsigned spin = 0;; spin++) {
        int flag = 0;
        if (PMPI_Test(r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            *err = desc + ": " + (what ? what : "an agreement with the other ranks") + ": the real MPI failed it";
            return NM_ERR_MPI;
        }
        if (flag) return NM_OK;
        if ((spin & 255) != 255) continue;
        if (d.passed(nm_now_s())) {
            *err = deadline_message(what, desc);
            std::lock_guard<std::mutex> g(left_mu);
            left.push_back(Left{*r, std::move(buf)});
            nleft.fetch_add(1, std::memory_order_relaxed);
            *r = MPI_REQUEST_NULL;
            return NM_ERR_TIMEOUT;
        }
        sched_yield();
    }
}

nm_status_t agree_allgather(const void *mine, void *all, int bytes, MPI_Comm comm, const std::string &desc,
                            const char *what, std::string *err)
{
    int n = 1;
    PMPI_Comm_size(comm, &n);
    const Deadline d;
    // (the buffers outlive a wait that ran out: the request may complete later)
    std::unique_ptr<char[]> buf(new char[(size_t)bytes * (n + 1)]);
    memcpy(buf.get(), mine, bytes);
    MPI_Request r = MPI_REQUEST_NULL;
    if (PMPI_Iallgather(buf.get(), bytes, MPI_BYTE, buf.get() + bytes, bytes, MPI_BYTE, comm, &r) != MPI_SUCCESS) {
        *err = desc + ": the real MPI refused an agreement";
        return NM_ERR_MPI;
    }
    nm_status_t st = wait_agreement(&r, buf, d, what, desc, err);
    if (st == NM_OK) memcpy(all, buf.get() + bytes, (size_t)bytes * n);
    return st;
}

nm_status_t agree_min(int mine, int *all, MPI_Comm comm, const std::string &desc, const char *what, std::string *err)
{
    const Deadline d;
    std::unique_ptr<char[]> buf(new char[2 * sizeof(int)]);
    int *v = reinterpret_cast<int *>(buf.get());
    v[0] = mine;
    MPI_Request r = MPI_REQUEST_NULL;
    if (PMPI_Iallreduce(&v[0], &v[1], 1, MPI_INT, MPI_MIN, comm, &r) != MPI_SUCCESS) {
        *err = desc + ": the real MPI refused an agreement";
        return NM_ERR_MPI;
    }
    nm_status_t st = wait_agreement(&r, buf, d, what, desc, err);
    if (st == NM_OK) *all = v[1];
    return st;
}

nm_status_t agree_min_bounded(int mine, int *all, MPI_Comm comm, const std::string &desc, const char *what, std::string *err)
{
    if (nm_cfg.TIMEOUT > 0) return agree_min(mine, all, comm, desc, what, err);
    if (PMPI_Allreduce(&mine, all, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS) return NM_OK;
    *err = desc + ": the real MPI refused an agreement";
    return NM_ERR_MPI;
}

nm_status_t agree_barrier(MPI_Comm comm, const std::string &desc, const char *what, std::string *err)
{
    const Deadline d;
    std::unique_ptr<char[]> none;
    MPI_Request r = MPI_REQUEST_NULL;
    if (PMPI_Ibarrier(comm, &r) != MPI_SUCCESS) {
        *err = desc + ": the real MPI refused an agreement";
        return NM_ERR_MPI;
    }
    return wait_agreement(&r, none, d, what, desc, err);
}

}  // namespace ncclmpi
