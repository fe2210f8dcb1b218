// ncclmpi: MPICH's stream extension (MPIX_Stream, MPIX_*_enqueue) for programs written to it.
// The objects: a stream (a CUDA stream, or a general one that only names a context, as in MPICH),
// and a communicator's streams, kept in an attribute of ours so that MPI_Comm_dup copies them and
// MPI_Comm_free drops them. How enqueued calls run: enqueue.h and doc/design.md.
#include <mpi.h>
#include <sched.h>
#include <string.h>

#include <atomic>
#include <type_traits>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "core/cuda/memkind.h"
#include "core/dtype/buffers.h"
#include "core/comm/comm_state.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "core/stream/enqueue.h"
#include "interpose/interpose.h"
#include "ncclmpi.h"
#include "nm_impl.h"
#include "util/config.h"
#include "util/log.h"
#include "util/watchdog.h"

#define NM_API extern "C" __attribute__((visibility("default")))

struct ncclmpi_stream {
    CUstream stream = nullptr;  // the cudaStream_t it wraps (the default stream as
                                // CU_STREAM_LEGACY); nullptr: a general stream
    bool gpu() const { return stream != nullptr; }
    CUcontext ctx = nullptr;
    int device = -1;
    std::atomic<int> refs{1};  // the handle, and each communicator it is attached to
    MPIX_Stream handle = MPIX_STREAM_NULL;  // what MPIX_Stream_create gave the application
};

namespace {

// MPIX_Stream handles. Where the MPI declares no MPIX_Stream (Open MPI), ncclmpi.h declares it a
// pointer and a handle is the stream itself. MPICH declares an integer handle (its own streams':
// ncclmpi's functions replace them): there a handle is an index into a table of the streams made
// here, offset into a range MPICH's MPIX_STREAM_NULL is not in.
template <class H, bool Pointer = std::is_pointer<H>::value>
struct Handles {
    static ncclmpi_stream *get(H h) { return h; }
    static H add(ncclmpi_stream *s) { return s; }
    static void drop(H) {}
};
template <class H>
struct Handles<H, false> {
    static constexpr long kBase = 0x5a000000L;
    static std::mutex mu;
    static std::vector<ncclmpi_stream *> table;  // (a freed slot: nullptr, used again)
    static ncclmpi_stream *get(H h)
    {
        const long i = (long)h - kBase;
        std::lock_guard<std::mutex> g(mu);
        return i >= 0 && (size_t)i < table.size() ? table[(size_t)i] : nullptr;
    }
    static H add(ncclmpi_stream *s)
    {
        std::lock_guard<std::mutex> g(mu);
        size_t i = 0;
        while (i < table.size() && table[i]) i++;
        if (i == table.size()) table.push_back(nullptr);
        table[i] = s;
        return (H)(kBase + (long)i);
    }
    static void drop(H h)
    {
        const long i = (long)h - kBase;
        std::lock_guard<std::mutex> g(mu);
        if (i >= 0 && (size_t)i < table.size()) table[(size_t)i] = nullptr;
    }
};
template <class H>
std::mutex Handles<H, false>::mu;
template <class H>
std::vector<ncclmpi_stream *> Handles<H, false>::table;
using StreamHandles = Handles<MPIX_Stream>;

}  // namespace

extern "C" void nm_stream_comm_connect(MPI_Comm comm, int device);

namespace ncclmpi {

thread_local Enqueue *nm_enqueue_now __attribute__((tls_model("initial-exec")));

namespace {

// The last reference gone, the application may destroy the CUDA stream: the operations enqueued
// on it get their completion markers (events, which outlive the stream) now.
void stream_release(ncclmpi_stream *s)
{
    if (!s || s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (s->gpu()) engine_enqueued_mark();
    StreamHandles::drop(s->handle);  // (a communicator kept it: MPIX_Comm_get_stream gave its handle)
    delete s;
}

// A communicator's streams on this rank (one, or a multiplex communicator's list).
struct StreamComm {
    std::vector<ncclmpi_stream *> local;
    bool multiplex = false;
};

std::atomic<int> keyval{MPI_KEYVAL_INVALID};
std::mutex keyval_mu;

int copy_fn(MPI_Comm, int, void *, void *in, void *out, int *flag)
{
    const StreamComm *src = static_cast<const StreamComm *>(in);
    StreamComm *dst = new StreamComm(*src);
    for (ncclmpi_stream *s : dst->local)
        if (s) s->refs.fetch_add(1, std::memory_order_relaxed);
    *static_cast<void **>(out) = dst;
    *flag = 1;
    return MPI_SUCCESS;
}

int delete_fn(MPI_Comm, int, void *v, void *)
{
    StreamComm *sc = static_cast<StreamComm *>(v);
    // The application may destroy a CUDA stream once it has freed the communicators and the
    // MPIX_Stream it gave it to, while this layer's own references (a hidden duplicate's copy of
    // the attribute) still hold it: what was enqueued on it gets its markers at every free.
    for (ncclmpi_stream *s : sc->local)
        if (s && s->gpu()) {
            engine_enqueued_mark();
            break;
        }
    for (ncclmpi_stream *s : sc->local) stream_release(s);
    delete sc;
    return MPI_SUCCESS;
}

int stream_keyval()  // (no std::call_once: it sets thread-locals on every call)
{
    int k = keyval.load(std::memory_order_acquire);
    if (k != MPI_KEYVAL_INVALID) return k;
    std::lock_guard<std::mutex> g(keyval_mu);
    if ((k = keyval.load(std::memory_order_relaxed)) == MPI_KEYVAL_INVALID) {
        PMPI_Comm_create_keyval(copy_fn, delete_fn, &k, nullptr);
        keyval.store(k, std::memory_order_release);
    }
    return k;
}

const StreamComm *stream_comm(MPI_Comm comm)
{
    void *v = nullptr;
    int flag = 0;
    if (comm == MPI_COMM_NULL || PMPI_Comm_get_attr(comm, stream_keyval(), &v, &flag) != MPI_SUCCESS || !flag) return nullptr;
    return static_cast<const StreamComm *>(v);
}

int fail(const char *call, int cls, const std::string &why, MPI_Comm comm = MPI_COMM_WORLD)
{
    return nm_raise_call(call, cls, why.c_str(), comm);
}

int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Two hex digits per byte; "[n]" stands for n zero bytes (as MPICH's encoder writes runs of them).
// Returns the bytes decoded, or -1 when s is not such a string or holds more than n bytes.
int hex_decode(const char *s, unsigned char *out, int n)
{
    int k = 0;
    while (*s) {
        if (*s == '[') {
            char *end = nullptr;
            long z = strtol(s + 1, &end, 10);
            if (!end || *end != ']' || z < 0 || k + z > n) return -1;
            memset(out + k, 0, (size_t)z);
            k += (int)z;
            s = end + 1;
        } else {
            const int hi = hexval(s[0]), lo = hi < 0 ? -1 : hexval(s[1]);
            if (lo < 0 || k >= n) return -1;
            out[k++] = (unsigned char)(hi << 4 | lo);
            s += 2;
        }
    }
    return k;
}

// The calling rank's CUDA stream of comm for an enqueue call, or an MPI error code.
int enqueue_begin(const char *call, MPI_Comm comm, Enqueue *e)
{
    memset(e, 0, sizeof(*e));
    e->call = call;
    const StreamComm *sc = stream_comm(comm);
    if (!sc || sc->multiplex || sc->local.size() != 1 || !sc->local[0] || !sc->local[0]->gpu())
        return fail(call, MPI_ERR_ARG,
                    sc && sc->multiplex ? "the communicator has several streams (MPIX_Stream_comm_create_multiplex); "
                                          "enqueue calls need one, from MPIX_Stream_comm_create"
                                        : "the communicator has no CUDA stream attached on this rank (make it with "
                                          "MPIX_Stream_comm_create from a stream of info type \"cudaStream_t\")",
                    comm);
    e->stream = sc->local[0]->stream;
    e->ctx = sc->local[0]->ctx;
    return MPI_SUCCESS;
}

// The enqueued form of a point-to-point call: the stream's work first, then the call itself.
template <class F>
int enqueue_after_stream(const char *call, MPI_Comm comm, F f)
{
    Enqueue e;
    int rc = enqueue_begin(call, comm, &e);
    if (rc != MPI_SUCCESS) return rc;
    if (enqueue_sync(&e) != NM_OK) return fail(call, MPI_ERR_OTHER, "waiting for the work queued on its stream failed", comm);
    return f();
}

}  // namespace

bool enqueue_direct_ok(const Enqueue *e, const CommState *cs, const BufRef *b, int nb)
{
    if (!cs || !cs->pg || cs->pg->ctx() != e->ctx) return false;
    for (int i = 0; i < nb; i++) {
        if (b[i].empty()) continue;
        // host memory would be copied on the host after completion: not in the stream's order
        if ((b[i].kind != NM_MEM_DEVICE && b[i].kind != NM_MEM_MANAGED) || b[i].device != cs->pg->device()) return false;
    }
    return true;
}

bool comm_carries_streams(MPI_Comm comm) { return stream_comm(comm) != nullptr; }

nm_status_t enqueue_sync(Enqueue *e)
{
    CUresult q = cu.cuStreamQuery(e->stream);
    if (q == CUDA_SUCCESS) return NM_OK;
    WaitWatch w(e->call, "for the work queued on its stream before it");
    for (unsigned spin = 0; q == CUDA_ERROR_NOT_READY; spin++) {  // (NCCL's advice: poll, keep MPI moving)
        wait_step(spin);
        q = cu.cuStreamQuery(e->stream);
    }
    if (q != CUDA_SUCCESS) NM_ERROR(CALL, "%s: cuStreamQuery: %s", e->call, cuda_errstr(q));
    return q == CUDA_SUCCESS ? NM_OK : NM_ERR_CUDA;
}

}  // namespace ncclmpi

using namespace ncclmpi;

// ---- objects ---------------------------------------------------------------------------------

NM_API int MPIX_Info_set_hex(MPI_Info info, const char *key, const void *value, int value_size)
{
    if (!key || value_size < 0 || (value_size > 0 && !value) || 2 * value_size + 1 > MPI_MAX_INFO_VAL)
        return fail("MPIX_Info_set_hex", MPI_ERR_ARG, "no key, no value, or a value longer than MPI_MAX_INFO_VAL / 2 bytes");
    static const char digits[] = "0123456789abcdef";
    std::string hex;
    for (int i = 0; i < value_size; i++) {
        const unsigned char c = static_cast<const unsigned char *>(value)[i];
        hex += digits[c >> 4];
        hex += digits[c & 15];
    }
    return PMPI_Info_set(info, key, hex.c_str());
}

NM_API int MPIX_Stream_create(MPI_Info info, MPIX_Stream *stream)
{
    static const char *call = "MPIX_Stream_create";
    if (!stream) return fail(call, MPI_ERR_ARG, "stream is NULL");
    char type[MPI_MAX_INFO_VAL + 1] = "", value[MPI_MAX_INFO_VAL + 1] = "";
    int has_type = 0, has_value = 0;
    if (info != MPI_INFO_NULL) {
        int rc = PMPI_Info_get(info, "type", MPI_MAX_INFO_VAL, type, &has_type);
        if (rc == MPI_SUCCESS) rc = PMPI_Info_get(info, "value", MPI_MAX_INFO_VAL, value, &has_value);
        if (rc != MPI_SUCCESS) return rc;
    }
    ncclmpi_stream *s = new ncclmpi_stream;
    if (has_type && strcmp(type, "cudaStream_t") == 0) {
        CUstream cs = nullptr;
        if (!has_value || hex_decode(value, reinterpret_cast<unsigned char *>(&cs), sizeof(cs)) != (int)sizeof(cs)) {
            delete s;
            return fail(call, MPI_ERR_ARG, "info key \"value\" must hold the cudaStream_t (MPIX_Info_set_hex(info, \"value\", &stream, sizeof(stream)))");
        }
        if (!cs) cs = CU_STREAM_LEGACY;  // stream 0: the legacy default stream
        CUcontext ctx = nullptr;
        CUdevice dev = -1;
        if (!cuda_attached() && !nm_linkmap_refresh()) {
            delete s;
            return fail(call, MPI_ERR_ARG, "a cudaStream_t was given, but no CUDA driver is loaded in the process");
        }
        CUresult r = cu.cuStreamGetCtx(cs, &ctx);
        if (r == CUDA_SUCCESS && !ctx) r = cu.cuCtxGetCurrent(&ctx);  // (the default streams name no context)
        if (r == CUDA_SUCCESS && ctx) {
            DeviceGuard g(ctx);
            r = cu.cuCtxGetDevice(&dev);
        }
        if (r != CUDA_SUCCESS || !ctx) {
            delete s;
            return fail(call, MPI_ERR_ARG, std::string("the cudaStream_t is not a usable CUDA stream (") + (r != CUDA_SUCCESS ? cuda_errstr(r) : "no current context") + ")");
        }
        s->stream = cs;
        s->ctx = ctx;
        s->device = (int)dev;
    } else if (has_type && strcmp(type, "hipStream_t") == 0) {
        delete s;
        return fail(call, MPI_ERR_ARG, "HIP streams are not supported (this is a CUDA build)");
    }
    *stream = s->handle = StreamHandles::add(s);
    return MPI_SUCCESS;
}

NM_API int MPIX_Stream_free(MPIX_Stream *stream)
{
    ncclmpi_stream *s = stream ? StreamHandles::get(*stream) : nullptr;
    if (!s) return fail("MPIX_Stream_free", MPI_ERR_ARG, "not a stream (MPIX_STREAM_NULL)");
    stream_release(s);  // a communicator it is attached to keeps it until freed
    *stream = MPIX_STREAM_NULL;
    return MPI_SUCCESS;
}

static int stream_comm_create(const char *call, MPI_Comm comm, int count, MPIX_Stream *streams, bool multiplex, MPI_Comm *newcomm)
{
    if (!newcomm || count < 0 || (count > 0 && !streams)) return fail(call, MPI_ERR_ARG, "newcomm is NULL, or a bad stream list", comm);
    int rc = nm_impl_Comm_dup(comm, newcomm);  // (the wrapper's: what a dup does for device use)
    if (rc != MPI_SUCCESS) return rc;
    StreamComm *sc = new StreamComm;
    sc->multiplex = multiplex;
    for (int i = 0; i < count; i++) {
        ncclmpi_stream *st = StreamHandles::get(streams[i]);  // (MPIX_STREAM_NULL: a general stream)
        if (st) st->refs.fetch_add(1, std::memory_order_relaxed);
        sc->local.push_back(st);
    }
    if (sc->local.empty()) sc->local.push_back(nullptr);
    if ((rc = PMPI_Comm_set_attr(*newcomm, stream_keyval(), sc)) != MPI_SUCCESS) {
        delete_fn(*newcomm, stream_keyval(), sc, nullptr);
        return rc;
    }
    // every rank of comm is here: make the NCCL communicator now where every rank has a CUDA
    // stream, so that no enqueued call has to (a creation waits for every rank)
    if (!multiplex) nm_stream_comm_connect(*newcomm, sc->local[0] && sc->local[0]->gpu() ? sc->local[0]->device : -1);
    return MPI_SUCCESS;
}

NM_API int MPIX_Stream_comm_create(MPI_Comm comm, MPIX_Stream stream, MPI_Comm *newcomm)
{
    return stream_comm_create("MPIX_Stream_comm_create", comm, 1, &stream, false, newcomm);
}

NM_API int MPIX_Stream_comm_create_multiplex(MPI_Comm comm, int count, MPIX_Stream array_of_streams[], MPI_Comm *newcomm)
{
    return stream_comm_create("MPIX_Stream_comm_create_multiplex", comm, count, array_of_streams, true, newcomm);
}

NM_API int MPIX_Comm_get_stream(MPI_Comm comm, int idx, MPIX_Stream *stream)
{
    if (!stream) return fail("MPIX_Comm_get_stream", MPI_ERR_ARG, "stream is NULL", comm);
    const StreamComm *sc = stream_comm(comm);
    *stream = sc && idx >= 0 && (size_t)idx < sc->local.size() && sc->local[idx] ? sc->local[idx]->handle : MPIX_STREAM_NULL;
    return MPI_SUCCESS;
}

NM_API int MPIX_Stream_progress(MPIX_Stream)
{
    tasks_progress();  // (the operations enqueued on streams, too)
    mpi_progress();
    return MPI_SUCCESS;
}

// ---- enqueued calls --------------------------------------------------------------------------

NM_API int MPIX_Allreduce_enqueue(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    Enqueue e;
    int rc = enqueue_begin("MPIX_Allreduce_enqueue", comm, &e);
    if (rc != MPI_SUCCESS) return rc;
    if (nm_cfg.DISABLE && enqueue_sync(&e) != NM_OK)
        return fail(e.call, MPI_ERR_OTHER, "waiting for the work queued on its stream failed", comm);
    nm_enqueue_now = &e;  // dispatch launches it on the stream, or waits for the stream first
    rc = nm_impl_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    nm_enqueue_now = nullptr;
    return rc;
}

NM_API int MPIX_Send_enqueue(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    return enqueue_after_stream("MPIX_Send_enqueue", comm, [&] { return nm_impl_Send(buf, count, datatype, dest, tag, comm); });
}

NM_API int MPIX_Recv_enqueue(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    return enqueue_after_stream("MPIX_Recv_enqueue", comm,
                                [&] { return nm_impl_Recv(buf, count, datatype, source, tag, comm, status); });
}

NM_API int MPIX_Isend_enqueue(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                              MPI_Request *request)
{
    return enqueue_after_stream("MPIX_Isend_enqueue", comm,
                                [&] { return nm_impl_Isend(buf, count, datatype, dest, tag, comm, request); });
}

NM_API int MPIX_Irecv_enqueue(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                              MPI_Request *request)
{
    return enqueue_after_stream("MPIX_Irecv_enqueue", comm,
                                [&] { return nm_impl_Irecv(buf, count, datatype, source, tag, comm, request); });
}

// The host completes the requests before returning: the stream's later work sees their data.
NM_API int MPIX_Wait_enqueue(MPI_Request *request, MPI_Status *status) { return nm_impl_Wait(request, status); }

NM_API int MPIX_Waitall_enqueue(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[])
{
    return nm_impl_Waitall(count, array_of_requests, array_of_statuses);
}
