// ncclmpi: MPI-4 partitioned communication on device buffers, staged per partition.
//
// MPI_Psend_init / MPI_Precv_init on a device buffer make the real MPI's partitioned request on a
// pinned host shadow of the buffer (its span: partitions * count elements of the datatype, laid
// out as on the device), held as a staged persistent request (persistent.h) with this file's
// extension:
// - a send copies partition p to the shadow at the MPI_Pready (_range, _list) that marks it, after
//   the application's work on the legacy stream, then the real MPI's MPI_Pready runs; MPI_Start
//   copies nothing;
// - a receive copies partition p back to the device at the first MPI_Parrived that finds it
//   arrived, and the whole buffer at the request's completion (a Wait, a Test,
//   MPI_Request_get_status, or in the background once freed while active). A datatype
//   with gaps copies the whole span in at MPI_Start first, so that the gaps come back as they were.
// The real MPI's messages are its own, unchanged: either side may use host or device memory, and
// the partitions of the two sides may differ as MPI-4 allows.
#include <mpi.h>

#include <limits.h>
#include <stdint.h>

#include <mutex>
#include <vector>

#include "core/cuda/memkind.h"
#include "core/dtype/buffers.h"
#include "core/dtype/dtype.h"
#include "core/engine/task.h"
#include "core/tl/staged/persistent.h"
#include "core/tl/staged/staging.h"
#include "interpose/interpose.h"
#include "util/log.h"
#include "util/stats.h"

#ifdef NM_HAVE_FN_Psend_init
namespace ncclmpi {
namespace {

struct Part final : PersExt {
    bool send = false;
    int parts = 0;
    MPI_Count count = 0;
    DtypeInfo info{};              // the datatype's (the application may free it after the init)
    MPI_Comm comm = MPI_COMM_NULL; // whose error handler reports a failed copy
    MPI_Aint lo = 0;               // the shadow's first byte, relative to the buffer
    std::mutex mu;                 // back (MPI_Parrived may be called from several threads)
    std::vector<unsigned char> back;  // a receive's partitions copied back in this activation

    // Bytes of partitions [a, b] relative to the shadow's start.
    void range(int a, int b, size_t *off, size_t *len) const
    {
        MPI_Aint l, h;
        dtype_span(&info, (MPI_Aint)((MPI_Count)a * count) * info.extent, (long long)((MPI_Count)(b - a + 1) * count), &l,
                   &h);
        *off = (size_t)(l - lo);
        *len = (size_t)(h - l);
    }

    bool start(Stage *) override
    {
        if (send) return false;  // copied at each MPI_Pready
        std::lock_guard<std::mutex> g(mu);
        std::fill(back.begin(), back.end(), 0);
        return true;  // (a datatype with gaps: the span in, see above)
    }

    // Partition p of a receive goes back now, unless an MPI_Parrived of this activation did it.
    nm_status_t copy_back(int p, Stage *s)
    {
        std::lock_guard<std::mutex> g(mu);
        if (back[p]) return NM_OK;
        size_t off, len;
        range(p, p, &off, &len);
        const nm_status_t st = stage_copy_range(s, off, len, true);
        if (st == NM_OK) back[p] = 1;
        return st;
    }

    // The whole buffer goes back, the partitions an MPI_Parrived copied too: Open MPI 5.0.11's
    // MPI_Parrived can report a receive partition before all of it landed where the sender's
    // partitions are finer (host buffers, without ncclmpi), and what the completion copies is
    // then what the real MPI delivered.
    int complete(Stage *s, MPI_Comm comm) override
    {
        if (send) return MPI_SUCCESS;
        const nm_status_t st = stage_copy_range(s, 0, SIZE_MAX, true);  // (clipped to the shadow)
        if (st == NM_OK) return MPI_SUCCESS;
        return nm_raise_error(NM_FN_Precv_init, st, "the copy of a partitioned receive's partitions back to the device failed",
                              comm != MPI_COMM_NULL ? comm : this->comm);
    }
};

// Psend_init / Precv_init on a device buffer (the wrapper found one): the real MPI's call on a shadow.
int part_init(int fn, bool send, const void *buf, int partitions, MPI_Count count, MPI_Datatype dt, int peer, int tag,
              MPI_Comm comm, MPI_Info info, MPI_Request *request)
{
    if (nm_hot.queued) nm_flush();
    auto real = [&](const void *b) {
        return send ? PMPI_Psend_init(b, partitions, count, dt, peer, tag, comm, info, request)
                    : PMPI_Precv_init(const_cast<void *>(b), partitions, count, dt, peer, tag, comm, info, request);
    };
    const DtypeInfo *d = dtype_info(dt);
    MPI_Count n = 0;
    // a bad argument, or no data: the real MPI answers as without ncclmpi, on no buffer of ours
    if (!d || partitions <= 0 || count < 0 || __builtin_mul_overflow((MPI_Count)partitions, count, &n) || n == 0 ||
        d->size == 0 || peer == MPI_PROC_NULL)
        return real(nullptr);
    MPI_Aint lo, hi, span;
    if (__builtin_mul_overflow((MPI_Aint)(n - 1), d->extent, &span) ||
        __builtin_add_overflow(span, d->true_lb + d->true_extent, &span)) {
        *request = MPI_REQUEST_NULL;
        return nm_raise_error(fn, NM_ERR_COUNT, "the buffer's span does not fit an address", comm);
    }
    dtype_span(d, 0, (long long)n, &lo, &hi);
    int dev = -1;
    BufRef b{!send, const_cast<void *>(buf), send ? BUF_IN : BUF_OUT, lo, hi, d->contig, NM_MEM_DEVICE, -1};
    b.kind = nm_mem_kind((const char *)buf + lo, &dev);
    b.device = dev;
    nm_op_t o;
    nm_op_init(&o, fn, NM_OPK_NONE, NM_OPF_PERS);  // (no point-to-point facts: no envelope decoding)
    o.comm = comm;
    Stage *s = nullptr;
    nm_status_t st = stage_in(&o, &b, 1, &s, false);
    if (st != NM_OK) {
        *request = MPI_REQUEST_NULL;
        return nm_raise_error(fn, st, "could not stage the partitioned buffer in host memory", comm);
    }
    NM_COUNT_ROUTE(fn, NCCLMPI_ROUTE_STAGED);
    int rc = real(send ? o.sbuf : o.rbuf);
    if (rc != MPI_SUCCESS) {
        stage_release(s);
        return rc;
    }
    Part *p = new Part;
    p->send = send;
    p->parts = partitions;
    p->count = count;
    p->info = *d;
    p->comm = comm;
    p->lo = lo;
    if (!send) p->back.assign((size_t)partitions, 0);
    pers_register(*request, s, comm, p);
    return MPI_SUCCESS;
}

// The send partitions `list` (n of them) or [lo, hi] of request req go to its shadow.
// 1 when req is a partitioned send on device memory (*rc: MPI_SUCCESS or the copy's error).
int part_ready(int fn, MPI_Request req, int lo, int hi, const int *list, int n, int *rc)
{
    Stage *s = nullptr;
    bool active = false;
    Part *p = static_cast<Part *>(pers_ext(req, &s, &active));
    if (!p || !p->send) return 0;
    *rc = MPI_SUCCESS;
    nm_status_t st = NM_OK;
    auto one = [&](int a, int b) {
        if (a < 0 || b >= p->parts || a > b) return;  // (the real MPI reports it)
        size_t off, len;
        p->range(a, b, &off, &len);
        if (st == NM_OK) st = stage_copy_range(s, off, len, false);
    };
    if (list) for (int i = 0; i < n; i++) one(list[i], list[i]);
    else one(lo, hi);
    if (st != NM_OK) *rc = nm_raise_error(fn, st, "the copy of a partition of a device buffer to the host failed", p->comm);
    return 1;
}

}  // namespace
}  // namespace ncclmpi

using namespace ncclmpi;

extern "C" int nm_part_psend_init(const void *buf, int partitions, MPI_Count count, MPI_Datatype datatype, int dest,
                                  int tag, MPI_Comm comm, MPI_Info info, MPI_Request *request)
{
    return part_init(NM_FN_Psend_init, true, buf, partitions, count, datatype, dest, tag, comm, info, request);
}

extern "C" int nm_part_precv_init(void *buf, int partitions, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                                  MPI_Comm comm, MPI_Info info, MPI_Request *request)
{
    return part_init(NM_FN_Precv_init, false, buf, partitions, count, datatype, source, tag, comm, info, request);
}

// The partition calls: a failed copy ends the call with its error (the real MPI's MPI_Pready is
// not made: nothing of a partition that is not on the host goes out)
extern "C" int nm_pers_pready(int partition, MPI_Request request, int *rc)
{
    if (nm_hot.queued) nm_flush();
    if (!part_ready(NM_FN_Pready, request, partition, partition, nullptr, 0, rc)) return 0;
    if (*rc == MPI_SUCCESS) *rc = PMPI_Pready(partition, request);
    return 1;
}

extern "C" int nm_pers_pready_range(int partition_low, int partition_high, MPI_Request request, int *rc)
{
    if (nm_hot.queued) nm_flush();
    if (!part_ready(NM_FN_Pready_range, request, partition_low, partition_high, nullptr, 0, rc)) return 0;
    if (*rc == MPI_SUCCESS) *rc = PMPI_Pready_range(partition_low, partition_high, request);
    return 1;
}

extern "C" int nm_pers_pready_list(int length, NM_PREADY_LIST_CONST int *array_of_partitions, MPI_Request request, int *rc)
{
    if (nm_hot.queued) nm_flush();
    if (!part_ready(NM_FN_Pready_list, request, 0, -1, array_of_partitions, length, rc)) return 0;
    if (*rc == MPI_SUCCESS) *rc = PMPI_Pready_list(length, array_of_partitions, request);
    return 1;
}

extern "C" int nm_pers_parrived(MPI_Request request, int partition, int *flag, int *rc)
{
    if (nm_hot.queued) nm_flush();
    Stage *s = nullptr;
    bool active = false;
    Part *p = static_cast<Part *>(pers_ext(request, &s, &active));
    if (!p || p->send) return 0;
    *rc = PMPI_Parrived(request, partition, flag);
    // an arrived partition is the application's: on the device before the call returns
    if (*rc != MPI_SUCCESS || !*flag || !active || partition < 0 || partition >= p->parts) return 1;
    nm_status_t st = p->copy_back(partition, s);
    if (st != NM_OK)
        *rc = nm_raise_error(NM_FN_Parrived, st, "the copy of an arrived partition back to the device failed", p->comm);
    return 1;
}
#endif
