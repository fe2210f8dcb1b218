// ncclmpi: point-to-point envelopes (see envelope.h).
#include "core/tl/p2p/envelope.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <ctime>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/dtype/dtype.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"

namespace ncclmpi {

namespace {

bool on = false;
uint64_t nonce[2];
int my_wrank = 0;
MPI_Comm rel_comm = MPI_COMM_NULL;  // releases travel here (a duplicate of MPI_COMM_WORLD)
enum { TAG_RELEASE = 1 };

struct Held {
    char *payload;
    char *wire;
};
std::mutex mu;
std::unordered_map<uint32_t, Held> held;  // payloads waiting for their receivers
uint32_t next_id = 1;
struct Rel {
    MPI_Request req;
    uint32_t *id;
};
std::vector<Rel> releases;  // release messages in flight
unsigned long long sent_count = 0;

void release(int wrank, uint32_t id)
{
    Rel r{MPI_REQUEST_NULL, new uint32_t(id)};
    PMPI_Isend(r.id, 1, MPI_UINT32_T, wrank, TAG_RELEASE, rel_comm, &r.req);
    std::lock_guard<std::mutex> g(mu);
    releases.push_back(r);
}

// Pull n bytes from (pid, addr) into dst. false when the kernel refuses (another node, ptrace
// restrictions).
bool pull(void *dst, int pid, uint64_t addr, size_t n)
{
    if (pid == getpid()) {
        memcpy(dst, (const void *)(uintptr_t)addr, n);
        return true;
    }
    size_t done = 0;
    while (done < n) {
        struct iovec l = {(char *)dst + done, n - done}, r = {(void *)(uintptr_t)(addr + done), n - done};
        ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}

// The envelope in `wire`, if it is one of this job's.
bool decode(const char *wire, Envelope *e)
{
    memcpy(e, wire, sizeof(*e));
    return e->nonce[0] == nonce[0] && e->nonce[1] == nonce[1];
}

}  // namespace

void env_init()
{
    on = !strcmp(nm_cfg.P2P_ENVELOPE, "host");
    if (!on) return;
    PMPI_Comm_rank(MPI_COMM_WORLD, &my_wrank);
    if (my_wrank == 0) {
        int fd = open("/dev/urandom", O_RDONLY);
        if (fd < 0 || read(fd, nonce, sizeof(nonce)) != (ssize_t)sizeof(nonce)) {
            nonce[0] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(nullptr);
            nonce[1] = nonce[0] * 0xBF58476D1CE4E5B9ull + 1;
        }
        if (fd >= 0) close(fd);
    }
    PMPI_Bcast(nonce, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    PMPI_Comm_dup(MPI_COMM_WORLD, &rel_comm);
    NM_INFO(INIT, "point-to-point envelopes on (test mode: host messages of %zu bytes and more)",
            (size_t)nm_cfg.P2P_ENVELOPE_MIN);
}

bool env_on() { return on; }

bool env_comm(MPI_Comm comm)
{
    if (!on || comm == MPI_COMM_NULL) return false;
    int inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    return !inter;
}

int env_send(nm_op_t *o, int *rc)
{
    const int fn = o->fn;
    if (!on || (o->flags & NM_OPF_PERS) || o->peer == MPI_PROC_NULL || o->kind != NM_OPK_SEND) return 0;
    if (fn != NM_FN_Send && fn != NM_FN_Ssend && fn != NM_FN_Rsend && fn != NM_FN_Isend && fn != NM_FN_Issend &&
        fn != NM_FN_Irsend)
        return 0;  // buffered sends stay as they are (their buffer accounting is the user's)
    const DtypeInfo *d = dtype_info(o->stype);
    if (!d || !d->contig || o->scount < 0 || !env_comm(o->comm)) return 0;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(d, 0, o->scount, &lo, &hi);
    const size_t bytes = hi > lo ? (size_t)(hi - lo) : 0;
    if (bytes < (size_t)nm_cfg.P2P_ENVELOPE_MIN || bytes <= NM_ENV_WIRE) return 0;
    env_progress();  // free what was released
    Held h{(char *)malloc(bytes), (char *)calloc(1, 64)};
    if (!h.payload || !h.wire) {
        free(h.payload);
        free(h.wire);
        return 0;  // the real MPI sends it as it is
    }
    memcpy(h.payload, (const char *)o->sbuf + lo, bytes);
    Envelope e{{nonce[0], nonce[1]}, bytes, (uint64_t)(uintptr_t)h.payload, (int32_t)getpid(), my_wrank, 0, 0};
    {
        std::lock_guard<std::mutex> g(mu);
        e.id = next_id++;
        held[e.id] = h;
        sent_count++;
    }
    memcpy(h.wire, &e, sizeof(e));
    switch (fn) {
    case NM_FN_Send: *rc = PMPI_Send(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Ssend: *rc = PMPI_Ssend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Rsend: *rc = PMPI_Rsend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm); break;
    case NM_FN_Isend: *rc = PMPI_Isend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    case NM_FN_Issend: *rc = PMPI_Issend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    default: *rc = PMPI_Irsend(h.wire, NM_ENV_WIRE, MPI_BYTE, o->peer, o->tag, o->comm, o->req); break;
    }
    if (*rc != MPI_SUCCESS) {  // never sent: nobody will release it
        std::lock_guard<std::mutex> g(mu);
        held.erase(e.id);
        free(h.payload);
        free(h.wire);
    }
    return 1;
}

static int finish_at(char *span, size_t cap, bool contiguous, const Decode *d, MPI_Status *st)
{
    MPI_Count got = MPI_UNDEFINED;
    int cancelled = 0;
    PMPI_Test_cancelled(st, &cancelled);
    if (cancelled || PMPI_Get_elements_x(st, MPI_BYTE, &got) != MPI_SUCCESS || got != NM_ENV_WIRE) return MPI_SUCCESS;
    char wire[64];
    if (contiguous) {
        memcpy(wire, span, NM_ENV_WIRE);
    } else {  // the 61 bytes landed through the datatype: pack them back out
        std::vector<char> packed(cap);
        int pos = 0;
        if (PMPI_Pack(d->buf, d->count, d->type, packed.data(), (int)cap, &pos, d->comm) != MPI_SUCCESS) return MPI_SUCCESS;
        memcpy(wire, packed.data(), NM_ENV_WIRE);
    }
    Envelope e;
    if (!decode(wire, &e)) return MPI_SUCCESS;  // a message of that size, not an envelope
    const size_t n = std::min<size_t>(e.bytes, cap);
    bool ok;
    if (contiguous) {
        ok = pull(span, e.pid, e.addr, n);
    } else {
        std::vector<char> tmp(n);
        ok = pull(tmp.data(), e.pid, e.addr, n);
        int pos = 0;
        const DtypeInfo *di = dtype_info(d->type);
        const int elems = di && di->size ? (int)(n / di->size) : 0;
        if (ok) ok = PMPI_Unpack(tmp.data(), (int)n, &pos, d->buf, elems, d->type, d->comm) == MPI_SUCCESS;
    }
    release(e.wrank, e.id);
    if (!ok) {
        NM_ERROR(CALL, "cannot read a point-to-point payload of %llu bytes from process %d", (unsigned long long)e.bytes, e.pid);
        return MPI_ERR_OTHER;
    }
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)n);
    if (e.bytes > cap) return MPI_ERR_TRUNCATE;
    return MPI_SUCCESS;
}

int env_finish(const Decode &d, MPI_Status *st)
{
    if (!on || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    const DtypeInfo *di = dtype_info(d.type);
    if (!di || d.count <= 0) return MPI_SUCCESS;
    MPI_Aint lo = 0, hi = 0;
    dtype_span(di, 0, d.count, &lo, &hi);
    const size_t cap = (size_t)d.count * di->size;
    return finish_at((char *)d.buf + lo, cap, di->contig, &d, st);
}

int env_finish_bytes(void *at, size_t cap, MPI_Status *st)
{
    if (!on || !st || st == MPI_STATUS_IGNORE) return MPI_SUCCESS;
    return finish_at((char *)at, cap, true, nullptr, st);
}

void env_progress()
{
    if (!on) return;
    std::unique_lock<std::mutex> g(mu, std::try_to_lock);
    if (!g.owns_lock()) return;
    for (size_t i = 0; i < releases.size();) {
        int flag = 0;
        PMPI_Test(&releases[i].req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            delete releases[i].id;
            releases[i] = releases.back();
            releases.pop_back();
        } else {
            i++;
        }
    }
    while (!held.empty()) {
        int flag = 0;
        MPI_Status st;
        PMPI_Iprobe(MPI_ANY_SOURCE, TAG_RELEASE, rel_comm, &flag, &st);
        if (!flag) break;
        uint32_t id = 0;
        PMPI_Recv(&id, 1, MPI_UINT32_T, st.MPI_SOURCE, TAG_RELEASE, rel_comm, MPI_STATUS_IGNORE);
        auto it = held.find(id);
        if (it == held.end()) continue;
        free(it->second.payload);
        free(it->second.wire);
        held.erase(it);
    }
}

void env_drain()
{
    if (!on) return;
    NM_INFO(CALL, "%llu point-to-point message(s) went as envelopes", sent_count);
    const double t0 = nm_now_s();
    for (;;) {
        env_progress();
        {
            std::lock_guard<std::mutex> g(mu);
            if ((held.empty() && releases.empty()) || nm_now_s() - t0 > 2.0) {
                if (!held.empty())
                    NM_WARN(CALL, "MPI_Finalize: %zu point-to-point payload(s) never received", held.size());
                return;
            }
        }
        sched_yield();
    }
}

}  // namespace ncclmpi

// how many messages went as envelopes (tests look it up with dlsym)
extern "C" __attribute__((visibility("default"))) unsigned long long ncclmpi_test_envelopes_sent(void)
{
    return ncclmpi::sent_count;
}
