// ncclmpi: receiving point-to-point envelopes: what a receive got decoded, its payload pulled.
#include "core/tl/p2p/env_internal.h"

#include <algorithm>
#include <cstring>

#include "core/dtype/dtype.h"
#include "core/engine/engine.h"
#include "core/engine/task.h"
#include "util/log.h"

namespace ncclmpi {

using namespace env;

// The envelope in `wire`, if it is one of this job's.
bool env::decode(const char *wire, Envelope *e)
{
    memcpy(e, wire, sizeof(*e));
    return e->nonce[0] == nonce[0] && e->nonce[1] == nonce[1];
}

// The whole elements of n packed bytes at src into count elements of type at buf: in pieces of at
// most 1 GiB (the real MPI's insize is an int).
static bool unpack_pieces(const char *src, size_t n, void *buf, int count, MPI_Datatype type, MPI_Comm comm)
{
    const DtypeInfo *di = dtype_info(type);
    if (!di || !di->size) return true;  // (nothing to unpack)
    const long long elems = std::min<long long>((long long)(n / di->size), count);
    const int per = nm_piece_elems(di->size, 1u << 30);
    for (long long done = 0; done < elems;) {
        const int k = (int)std::min<long long>(per, elems - done);
        int pos = 0;
        if (PMPI_Unpack(src + (size_t)done * di->size, (int)((size_t)k * di->size), &pos,
                        (char *)buf + (MPI_Aint)done * di->extent, k, type, comm) != MPI_SUCCESS)
            return false;
        done += k;
    }
    return true;
}

// Pulls e's payload into a receive buffer (the contiguous span of cap bytes at `span`, or through
// buf/count/type when not contiguous), releases it, and sets *n to the bytes delivered. Returns an
// MPI code (MPI_ERR_TRUNCATE when the payload does not fit).
// to_host: span is host memory.
int env::pull_payload(const Envelope &e, char *span, size_t cap, bool contiguous, void *buf, int count,
                      MPI_Datatype type, MPI_Comm comm, size_t *n, bool to_host, CUstream stream, EnvRelease *later)
{
    *n = std::min<size_t>(e.bytes, cap);
    bool ok;
    const bool queued = contiguous && stream && later && e.transport == NM_ENV_IPC;
    if (contiguous) {
        ok = pull(span, e, *n, queued ? stream : nullptr, to_host);
    } else {
        std::vector<char> tmp(*n);
        ok = pull(tmp.data(), e, *n, nullptr, true) && unpack_pieces(tmp.data(), *n, buf, count, type, comm);
    }
    if (queued && ok) {
        later->wrank = e.wrank;
        later->id = e.id;
    } else {
        release(e.wrank, e.id);  // (a payload that cannot be read is given back too)
    }
    if (!ok) {
        char msg[MPI_MAX_ERROR_STRING];
        snprintf(msg, sizeof(msg), "ncclmpi: cannot read a point-to-point payload from process %d%s", e.pid,
                 e.transport == NM_ENV_IPC ? " (its GPU memory, over CUDA IPC); where ranks cannot map each other's GPU "
                                             "memory, set NCCLMPI_P2P_ENVELOPE=off"
                                           : "");
        NM_ERROR(CALL, "%s (%llu bytes)", msg + 9, (unsigned long long)e.bytes);
        return nm_error_code(MPI_ERR_OTHER, msg);
    }
    return e.bytes > cap ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
}

static int finish_at(char *span, size_t cap, bool contiguous, const Decode *d, MPI_Status *st, void *dev_at = nullptr,
                     bool *direct = nullptr, CUstream stream = nullptr, EnvRelease *later = nullptr)
{
    if (d && d->has_preset) {  // delivered from the probe queue when the call was made
        st->MPI_SOURCE = d->preset.MPI_SOURCE;
        st->MPI_TAG = d->preset.MPI_TAG;
        MPI_Count c = 0;
        PMPI_Get_elements_x(&d->preset, MPI_BYTE, &c);
        PMPI_Status_set_elements_x(st, MPI_BYTE, c);
        return d->preset_rc;
    }
    int cancelled = 0;
    if (status_bytes(st) != NM_ENV_WIRE) return MPI_SUCCESS;
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled) return MPI_SUCCESS;
    char wire[NM_ENV_WIRE + 3];
    if (contiguous) {
        memcpy(wire, span, NM_ENV_WIRE);
    } else {  // the envelope landed through the datatype: pack its first elements back out (a
              // buffer of any size: never the whole of it)
        const DtypeInfo *di = dtype_info(d->type);
        const int k = (int)nm_prefix_elems(d->count, di ? di->size : 0, NM_ENV_WIRE);
        int psz = 0, pos = 0;
        if (PMPI_Pack_size(k, d->type, d->comm, &psz) != MPI_SUCCESS || psz < NM_ENV_WIRE) return MPI_SUCCESS;
        std::vector<char> packed((size_t)psz);
        if (PMPI_Pack(d->buf, k, d->type, packed.data(), psz, &pos, d->comm) != MPI_SUCCESS || pos < NM_ENV_WIRE)
            return MPI_SUCCESS;
        memcpy(wire, packed.data(), NM_ENV_WIRE);
    }
    Envelope e;
    if (!decode(wire, &e)) return MPI_SUCCESS;  // a message of that size, not an envelope
    size_t n = 0;
    if (dev_at && e.transport == NM_ENV_IPC) {  // a device payload straight into the device buffer
        span = (char *)dev_at;
        *direct = true;
    }
    const bool to_device = span == dev_at;  // (queued copies go to device memory only)
    int rc = pull_payload(e, span, cap, contiguous, d ? d->buf : nullptr, d ? d->count : 0,
                          d ? d->type : MPI_DATATYPE_NULL, d ? d->comm : MPI_COMM_WORLD, &n, !to_device,
                          to_device ? stream : nullptr, later);
    if (rc == MPI_SUCCESS || rc == MPI_ERR_TRUNCATE) PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)n);
    return rc;
}

static FreeList<Decode> decode_pool;

Decode *decode_new(const Decode &init)
{
    Decode *d = decode_pool.get();
    *d = init;
    return d;
}

void decode_free(Decode *d)
{
    if (d) decode_pool.put(d);
}

int env_finish(const Decode &d, MPI_Status *st)
{
    if (!nm_env_active || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    // (most messages are not of the envelope's size: nothing more to do)
    if (!d.has_preset && status_bytes(st) != NM_ENV_WIRE) return MPI_SUCCESS;
    const DtypeInfo *di = dtype_info(d.type);
    if (!di || d.count <= 0) return MPI_SUCCESS;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(di, 0, d.count, &lo, &hi);
    const size_t cap = (size_t)d.count * di->size;
    return finish_at((char *)d.buf + lo, cap, di->contig, &d, st);
}

int env_finish_bytes(void *at, size_t cap, MPI_Status *st, void *dev_at, bool *direct, CUstream stream, EnvRelease *later)
{
    *direct = false;
    if (!nm_env_active || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    return finish_at((char *)at, cap, true, nullptr, st, dev_at, direct, stream, later);
}

}  // namespace ncclmpi
