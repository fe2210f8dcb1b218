/* gpu_p2p: a seeded random point-to-point matching test on device and host buffers.
 *
 *   gpu_p2p [--host] [--seed S] [--rounds R] [--max BYTES]
 *
 * Every round, each rank sends a few messages (random peers, itself and MPI_PROC_NULL included,
 * tags 0-3, 0 bytes to --max, MPI_Isend or MPI_Issend) from buffers of a random kind (device,
 * malloc, pinned; only malloc with --host). The plan derives from the seed alone, so every rank
 * knows every message it will get. A receiver then takes its messages one of three ways, chosen
 * per round:
 *   specific  MPI_Irecv(source, tag) per message in an order that keeps each (source, tag)'s
 *             messages in send order, one of them into a buffer one byte short (MPI_ERR_TRUNCATE)
 *   wildcard  MPI_Irecv(MPI_ANY_SOURCE, MPI_ANY_TAG) per message, into buffers of the largest size
 *   probe     MPI_Mprobe (by source and tag, or wildcards) then MPI_Mrecv into a buffer of the
 *             probed size, or MPI_Iprobe until it matches then MPI_Recv
 * plus a receive from MPI_PROC_NULL and a cancelled receive that nothing matches. Checks: the
 * status (source, tag, MPI_Get_count), the bytes (a pattern of source, destination, tag and the
 * message's sequence number within its (source, tag)), nothing written past the count, the
 * non-overtaking order per (source, tag) in the order receives were posted, every message received
 * once, truncation reported as MPI_ERR_TRUNCATE, cancellation as cancelled. Errors are returned
 * (MPI_ERRORS_RETURN on the test's communicator). After the rounds, an all-to-all by
 * point-to-point whose messages (64 KiB and 1 MiB, from device memory) are sent long before their
 * receives are posted (a barrier between). --host: the same on malloc buffers (label mpi).
 */
#include "gpu_common.h"
#include <stdarg.h>
#include <stdint.h>

#define GUARD 64
#define POISON 0x5A
#define NTAGS 4
#define CANCEL_TAG 77

static int rank, size, failures, host_mode;
static size_t max_bytes = 8u << 20;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    char msg[512];
    int k = snprintf(msg, sizeof(msg), "gpu_p2p: [rank %d] FAIL ", rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + k, sizeof(msg) - k, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    failures++;
}

/* splitmix64: one stream per (seed, round, rank), identical on every rank */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static unsigned rnd(uint64_t *s, unsigned n) { return (unsigned)(rng_next(s) % n); }

static unsigned char pattern(int src, int dst, int tag, int seq, size_t i)
{
    return (unsigned char)(src * 131 + dst * 31 + tag * 7 + seq * 13 + i * 3 + (i >> 8));
}

typedef struct {
    int dst, tag, seq, ssend, kind;
    size_t bytes;
} msg_t;

/* the messages rank src sends in round r */
static int plan(uint64_t seed, int r, int src, msg_t *m, int cap)
{
    static const size_t sizes[] = {0, 1, 7, 64, 4096, 65536 + 13, 1u << 20, (3u << 20) + 5, 8u << 20};
    uint64_t s = seed * 1000003u + (uint64_t)r * 7919u + (uint64_t)src;
    int n = (int)rnd(&s, 7);
    if (n > cap) n = cap;
    int seqs[64][NTAGS] = {{0}};
    for (int i = 0; i < n; i++) {
        int d = (int)rnd(&s, (unsigned)size + 1);
        m[i].dst = d == size ? MPI_PROC_NULL : d;
        m[i].tag = (int)rnd(&s, NTAGS);
        size_t b;
        do b = sizes[rnd(&s, sizeof(sizes) / sizeof(sizes[0]))];
        while (b > max_bytes);
        m[i].bytes = b;
        m[i].ssend = rnd(&s, 4) == 0;
        int k = (int)rnd(&s, 3);
        m[i].kind = host_mode ? MK_MALLOC : k == 0 ? MK_DEV : k == 1 ? MK_MALLOC : MK_PINNED;
        m[i].seq = m[i].dst == MPI_PROC_NULL ? 0 : seqs[m[i].dst][m[i].tag]++;
    }
    return n;
}

typedef struct {
    int kind;
    size_t cap;           /* bytes the receive may write */
    size_t lead;          /* guard bytes before them: GUARD, or GUARD + 5 (an unaligned buffer) */
    unsigned char *base;  /* lead + cap + GUARD */
} rbuf_t;

static rbuf_t rb_new(int kind, size_t cap)
{
    static unsigned made;
    const size_t lead = GUARD + (made++ % 3 == 2 ? 5 : 0);  /* every third buffer unaligned */
    rbuf_t b = {kind, cap, lead, mk_alloc(kind, lead + cap + GUARD)};
    unsigned char *h = malloc(lead + cap + GUARD);
    memset(h, POISON, lead + cap + GUARD);
    put_bytes(kind, b.base, h, lead + cap + GUARD);
    free(h);
    /* a cudaMemcpy from pageable memory may return before its DMA is done; rb_check reads
     * through a stream that does not wait for it */
    if (kind != MK_MALLOC) CUDACHECK(cudaDeviceSynchronize());
    return b;
}
static void *rb_ptr(const rbuf_t *b) { return b->base + b->lead; }

/* the received bytes must be the pattern of (src, dst, tag, seq) up to count, poison after */
static void rb_check(const rbuf_t *b, int src, int tag, int seq, size_t count, const char *what)
{
    unsigned char *h = malloc(b->lead + b->cap + GUARD);
    get_bytes_unordered(b->kind, h, b->base, b->lead + b->cap + GUARD);
    for (size_t i = 0; i < b->lead + GUARD; i++)
        if (h[i < b->lead ? i : b->cap + i] != POISON) {
            fail("%s: a guard byte around the %zu-byte %s buffer was written", what, b->cap, mk_name[b->kind]);
            break;
        }
    for (size_t i = 0; i < b->cap; i++) {
        unsigned char want = i < count ? pattern(src, rank, tag, seq, i) : POISON;
        if (h[b->lead + i] != want) {
            fail("%s: byte %zu of %zu (%s, from %d tag %d seq %d) is 0x%02x, want 0x%02x", what, i, count,
                 mk_name[b->kind], src, tag, seq, h[b->lead + i], want);
            break;
        }
    }
    free(h);
}

static void rb_free(rbuf_t *b) { mk_free(b->kind, b->base); }

/* per source and tag: how many messages this rank has taken so far in the round */
static int taken[64][NTAGS];

/* a completed receive: the status against what was asked (and, when known, the size of the
 * message it must be), the bytes against the pattern of the next message of its (source, tag) */
static void received(const rbuf_t *b, const MPI_Status *st, int want_src, int want_tag, size_t want_bytes, const char *how)
{
    int src = st->MPI_SOURCE, tag = st->MPI_TAG, count = -1;
    MPI_Get_count(st, MPI_BYTE, &count);
    if ((want_src != MPI_ANY_SOURCE && src != want_src) || (want_tag != MPI_ANY_TAG && tag != want_tag) ||
        src < 0 || src >= size || tag < 0 || tag >= NTAGS) {
        fail("%s: status source %d tag %d, asked for source %d tag %d", how, src, tag, want_src, want_tag);
        return;
    }
    int seq = taken[src][tag]++;
    if (want_bytes != (size_t)-1 && (size_t)count != want_bytes)
        fail("%s: MPI_Get_count %d, the message from %d tag %d has %zu bytes", how, count, src, tag, want_bytes);
    rb_check(b, src, tag, seq, (size_t)count, how);
}

/* the size of the next message from src with tag that this rank has not taken, or -1 */
static size_t next_size(const msg_t *const *in, int nin, const msg_t *all, int cap, int src, int tag)
{
    if (src < 0 || src >= size || tag < 0 || tag >= NTAGS) return (size_t)-1;
    for (int i = 0; i < nin; i++)
        if ((in[i] - all) / cap == src && in[i]->tag == tag && in[i]->seq == taken[src][tag]) return in[i]->bytes;
    return (size_t)-1;
}

/* A completed send leaves its buffer to the application: each rank sends 8 MiB from device memory
 * to the next (MPI_Isend + MPI_Wait, then MPI_Send), overwrites each buffer through a stream that
 * does not wait for the legacy stream as soon as the call is complete, and the receiver (whose
 * receives were posted first) must still get what was sent. */
static void reuse_after_send(MPI_Comm c)
{
    enum { N = 8 << 20 };
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char *h = malloc(N), *got = malloc(N);
    char *s[2], *d[2];
    cudaStream_t other;
    CUDACHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    MPI_Request rq[2], sq;
    for (int k = 0; k < 2; k++) {
        CUDACHECK(cudaMalloc((void **)&s[k], N));
        CUDACHECK(cudaMalloc((void **)&d[k], N));
        CUDACHECK(cudaMemset(d[k], POISON, N));
        for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 13 + rank * 7 + k * 3 + 1);
        CUDACHECK(cudaMemcpy(s[k], h, N, cudaMemcpyHostToDevice));
    }
    CUDACHECK(cudaDeviceSynchronize());
    for (int k = 0; k < 2; k++) MPI_Irecv(d[k], N, MPI_BYTE, prev, 40 + k, c, &rq[k]);
    MPI_Barrier(c);
    MPI_Isend(s[0], N, MPI_BYTE, next, 40, c, &sq);
    MPI_Wait(&sq, MPI_STATUS_IGNORE);
    CUDACHECK(cudaMemsetAsync(s[0], 0xEE, N, other));
    MPI_Send(s[1], N, MPI_BYTE, next, 41, c);
    CUDACHECK(cudaMemsetAsync(s[1], 0xEE, N, other));
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < 2; k++) {
        get_bytes_unordered(MK_DEV, got, d[k], N);
        for (size_t i = 0; i < N; i++)
            if (got[i] != (unsigned char)(i * 13 + prev * 7 + k * 3 + 1)) {
                fail("%s, then its buffer overwritten: byte %zu of %d from %d is 0x%02x", k ? "MPI_Send" : "MPI_Isend + MPI_Wait",
                     i, N, prev, got[i]);
                break;
            }
    }
    CUDACHECK(cudaStreamSynchronize(other));
    CUDACHECK(cudaStreamDestroy(other));
    for (int k = 0; k < 2; k++) {
        CUDACHECK(cudaFree(s[k]));
        CUDACHECK(cudaFree(d[k]));
    }
    free(h);
    free(got);
}

int main(int argc, char **argv)
{
    uint64_t seed = 1;
    int rounds = 12;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host")) host_mode = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 10);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) {
        if (rank == 0) fprintf(stderr, "gpu_p2p: at most 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!host_mode) gpu_select(NULL);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (!host_mode) reuse_after_send(c);
    long nmsg = 0, ndev = 0;
    enum { CAP = 8 };
    msg_t *all = malloc(sizeof(msg_t) * CAP * size);
    int *nall = malloc(sizeof(int) * size);
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < size; p++) nall[p] = plan(seed, r, p, all + p * CAP, CAP);
        memset(taken, 0, sizeof(taken));
        /* what this rank gets: per source in send order */
        const msg_t *in[64 * CAP];
        int nin = 0;
        size_t maxin = 0;
        for (int p = 0; p < size; p++)
            for (int i = 0; i < nall[p]; i++)
                if (all[p * CAP + i].dst == rank) {
                    in[nin++] = &all[p * CAP + i];
                    if (all[p * CAP + i].bytes > maxin) maxin = all[p * CAP + i].bytes;
                }
        /* sends first, all nonblocking */
        const msg_t *mine = all + rank * CAP;
        MPI_Request sreq[CAP];
        void *sbuf[CAP], *sbase[CAP];
        for (int i = 0; i < nall[rank]; i++) {
            const msg_t *m = &mine[i];
            unsigned char *h = malloc(m->bytes + 1);
            for (size_t k = 0; k < m->bytes; k++) h[k] = pattern(rank, m->dst, m->tag, m->seq, k);
            sbase[i] = mk_alloc(m->kind, m->bytes + 5);
            sbuf[i] = (char *)sbase[i] + (i % 3 == 2 ? 5 : 0);  /* every third send buffer unaligned */
            put_bytes(m->kind, sbuf[i], h, m->bytes);
            free(h);
            int rc = (m->ssend ? MPI_Issend : MPI_Isend)(sbuf[i], (int)m->bytes, MPI_BYTE, m->dst, m->tag, c, &sreq[i]);
            if (rc != MPI_SUCCESS) fail("round %d: MPI_%s of %zu bytes to %d failed (%d)", r, m->ssend ? "Issend" : "Isend", m->bytes, m->dst, rc);
            nmsg++;
            ndev += m->kind == MK_DEV;
        }
        uint64_t rs = seed * 31u + (uint64_t)r * 1009u + (uint64_t)rank * 17u + 5u;
        int mode = (int)rnd(&rs, 3);
        int kind_any = host_mode ? MK_MALLOC : (int)rnd(&rs, 2) ? MK_DEV : MK_MALLOC;
        /* a receive nothing matches, cancelled */
        {
            rbuf_t b = rb_new(kind_any, 16);
            MPI_Request q;
            MPI_Status st;
            int cancelled = 0;
            MPI_Irecv(rb_ptr(&b), 16, MPI_BYTE, MPI_ANY_SOURCE, CANCEL_TAG, c, &q);
            MPI_Cancel(&q);
            MPI_Wait(&q, &st);
            MPI_Test_cancelled(&st, &cancelled);
            if (!cancelled) fail("round %d: a receive nothing could match was not cancelled", r);
            rb_check(&b, 0, 0, 0, 0, "cancelled receive");
            rb_free(&b);
        }
        /* a receive from MPI_PROC_NULL */
        {
            rbuf_t b = rb_new(kind_any, 8);
            MPI_Status st;
            int count = -1;
            MPI_Recv(rb_ptr(&b), 8, MPI_BYTE, MPI_PROC_NULL, 0, c, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (st.MPI_SOURCE != MPI_PROC_NULL || st.MPI_TAG != MPI_ANY_TAG || count != 0)
                fail("round %d: receive from MPI_PROC_NULL: source %d tag %d count %d", r, st.MPI_SOURCE, st.MPI_TAG, count);
            rb_check(&b, 0, 0, 0, 0, "receive from MPI_PROC_NULL");
            rb_free(&b);
        }
        if (mode == 0 && nin > 0) { /* specific: in an order that keeps each (source, tag) in sequence */
            int order[64 * CAP], used[64 * CAP] = {0};
            for (int k = 0; k < nin; k++) {
                /* pick a random message whose earlier same-(source, tag) messages are already picked */
                int cand[64 * CAP], nc = 0;
                for (int i = 0; i < nin; i++) {
                    if (used[i]) continue;
                    int ok = 1;  /* no earlier message of the same source and tag (smaller seq) is left */
                    for (int j = 0; j < nin; j++)
                        if (!used[j] && j != i && (in[j] - all) / CAP == (in[i] - all) / CAP && in[j]->tag == in[i]->tag &&
                            in[j]->seq < in[i]->seq)
                            ok = 0;
                    if (ok) cand[nc++] = i;
                }
                int pick = cand[rnd(&rs, (unsigned)nc)];
                used[pick] = 1;
                order[k] = pick;
            }
            int trunc = -1;
            for (int k = 0; k < nin && trunc < 0; k++)
                if (in[order[k]]->bytes > 0 && rnd(&rs, 2)) trunc = k;
            rbuf_t b[64 * CAP];
            MPI_Request q[64 * CAP];
            for (int k = 0; k < nin; k++) {
                const msg_t *m = in[order[k]];
                int src = (int)((m - all) / CAP);
                size_t cap = k == trunc ? m->bytes - 1 : m->bytes + rnd(&rs, 3) * 100;
                int kind = host_mode ? MK_MALLOC : (int)rnd(&rs, 3) == 0 ? MK_MALLOC : MK_DEV;
                b[k] = rb_new(kind, cap);
                int rc = MPI_Irecv(rb_ptr(&b[k]), (int)cap, MPI_BYTE, src, m->tag, c, &q[k]);
                if (rc != MPI_SUCCESS) fail("round %d: MPI_Irecv from %d tag %d failed (%d)", r, src, m->tag, rc);
            }
            for (int k = 0; k < nin; k++) {
                const msg_t *m = in[order[k]];
                int src = (int)((m - all) / CAP);
                MPI_Status st;
                int rc = MPI_Wait(&q[k], &st), cls = MPI_SUCCESS;
                if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
                if (k == trunc) {
                    if (cls != MPI_ERR_TRUNCATE) fail("round %d: %zu bytes into %zu: error class %d, not MPI_ERR_TRUNCATE", r, m->bytes, b[k].cap, cls);
                    taken[src][m->tag]++;
                } else if (rc != MPI_SUCCESS) {
                    fail("round %d: receive from %d tag %d: error class %d", r, src, m->tag, cls);
                    taken[src][m->tag]++;
                } else {
                    received(&b[k], &st, src, m->tag, m->bytes, "specific receive");
                }
                rb_free(&b[k]);
            }
        } else if (mode == 1 && nin > 0) { /* wildcard */
            rbuf_t b[64 * CAP];
            MPI_Request q[64 * CAP];
            MPI_Status st[64 * CAP];
            for (int k = 0; k < nin; k++) {
                int kind = host_mode ? MK_MALLOC : (int)rnd(&rs, 2) ? MK_MALLOC : MK_DEV;
                b[k] = rb_new(kind, maxin);
                MPI_Irecv(rb_ptr(&b[k]), (int)maxin, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &q[k]);
            }
            if (MPI_Waitall(nin, q, st) != MPI_SUCCESS) fail("round %d: MPI_Waitall of %d wildcard receives failed", r, nin);
            /* in posting order: each (source, tag) must come in send order */
            for (int k = 0; k < nin; k++) {
                int src = st[k].MPI_SOURCE, tag = st[k].MPI_TAG;
                size_t want = next_size(in, nin, all, CAP, src, tag);
                if (want == (size_t)-1) fail("round %d: wildcard receive %d got source %d tag %d: no such message left", r, k, src, tag);
                received(&b[k], &st[k], MPI_ANY_SOURCE, MPI_ANY_TAG, want, "wildcard receive");
                rb_free(&b[k]);
            }
        } else if (nin > 0) { /* probe */
            for (int k = 0; k < nin; k++) {
                int how = (int)rnd(&rs, 3), want_src = MPI_ANY_SOURCE, want_tag = MPI_ANY_TAG;
                if (how == 1) { /* by source and tag: the next message of a random (source, tag) still to come */
                    const msg_t *m = NULL;
                    for (int i = 0, t = (int)rnd(&rs, (unsigned)nin); i < nin && !m; i++) {
                        const msg_t *x = in[(i + t) % nin];
                        int s = (int)((x - all) / CAP);
                        if (x->seq == taken[s][x->tag]) m = x;
                    }
                    want_src = (int)((m - all) / CAP);
                    want_tag = m->tag;
                }
                MPI_Status st;
                int count = -1;
                rbuf_t b;
                if (how == 2) { /* Iprobe until it matches, then Recv of that source and tag */
                    int flag = 0;
                    while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, &flag, &st);
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    int kind = host_mode ? MK_MALLOC : (int)rnd(&rs, 2) ? MK_MALLOC : MK_DEV;
                    b = rb_new(kind, (size_t)count);
                    int s = st.MPI_SOURCE, t = st.MPI_TAG;
                    if (MPI_Recv(rb_ptr(&b), count, MPI_BYTE, s, t, c, &st) != MPI_SUCCESS) fail("round %d: MPI_Recv after MPI_Iprobe failed", r);
                } else {
                    MPI_Message msg;
                    if (MPI_Mprobe(want_src, want_tag, c, &msg, &st) != MPI_SUCCESS) fail("round %d: MPI_Mprobe failed", r);
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    int kind = host_mode ? MK_MALLOC : (int)rnd(&rs, 2) ? MK_MALLOC : MK_DEV;
                    b = rb_new(kind, (size_t)count);
                    if (MPI_Mrecv(rb_ptr(&b), count, MPI_BYTE, &msg, &st) != MPI_SUCCESS) fail("round %d: MPI_Mrecv failed", r);
                }
                size_t want = next_size(in, nin, all, CAP, st.MPI_SOURCE, st.MPI_TAG);
                received(&b, &st, want_src, want_tag, want, how == 2 ? "MPI_Iprobe + MPI_Recv" : "MPI_Mprobe + MPI_Mrecv");
                rb_free(&b);
            }
        }
        for (int i = 0; i < nall[rank]; i++) {
            if (MPI_Wait(&sreq[i], MPI_STATUS_IGNORE) != MPI_SUCCESS) fail("round %d: send %d failed", r, i);
            mk_free(mine[i].kind, sbase[i]);
        }
        /* every message taken exactly once */
        for (int i = 0; i < nin; i++) {
            int s = (int)((in[i] - all) / CAP);
            int n = 0;
            for (int j = 0; j < nin; j++) n += (in[j] - all) / CAP == s && in[j]->tag == in[i]->tag;
            if (taken[s][in[i]->tag] != n) {
                fail("round %d: %d of %d messages from %d tag %d taken", r, taken[s][in[i]->tag], n, s, in[i]->tag);
                taken[s][in[i]->tag] = n; /* once per pair */
            }
        }
        MPI_Barrier(c);
    }
    /* an all-to-all by point-to-point whose messages arrive long before their receives: every
     * rank sends to every rank (itself included) from device memory (malloc with --host), 64 KiB
     * and 1 MiB in turn, then a barrier (the sends stay outstanding), then the receives, posted
     * in reverse order of source, into every kind of buffer, and one MPI_Waitall for all */
    {
        const int kinds[3] = {MK_DEV, MK_MALLOC, MK_PINNED};
        MPI_Request *q = malloc(sizeof(MPI_Request) * 2 * size);
        void **sb = malloc(sizeof(void *) * size);
        rbuf_t *rb = malloc(sizeof(rbuf_t) * size);
        for (int p = 0; p < size; p++) {
            const size_t n = (size_t)((rank + p) % 2 ? 1u << 20 : 64u << 10);
            const int kind = host_mode ? MK_MALLOC : MK_DEV;
            unsigned char *h = malloc(n);
            for (size_t k = 0; k < n; k++) h[k] = pattern(rank, p, 9, 0, k);
            sb[p] = mk_alloc(kind, n);
            put_bytes(kind, sb[p], h, n);
            free(h);
            if (MPI_Isend(sb[p], (int)n, MPI_BYTE, p, 9, c, &q[size + p]) != MPI_SUCCESS) fail("all-to-all: MPI_Isend to %d failed", p);
        }
        MPI_Barrier(c);
        for (int p = size - 1; p >= 0; p--) {
            const size_t n = (size_t)((rank + p) % 2 ? 1u << 20 : 64u << 10);
            rb[p] = rb_new(host_mode ? MK_MALLOC : kinds[p % 3], n);
            if (MPI_Irecv(rb_ptr(&rb[p]), (int)n, MPI_BYTE, p, 9, c, &q[p]) != MPI_SUCCESS) fail("all-to-all: MPI_Irecv from %d failed", p);
        }
        MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * size);
        if (MPI_Waitall(2 * size, q, st) != MPI_SUCCESS) fail("all-to-all: MPI_Waitall failed");
        for (int p = 0; p < size; p++) {
            const size_t n = (size_t)((rank + p) % 2 ? 1u << 20 : 64u << 10);
            int count = -1;
            MPI_Get_count(&st[p], MPI_BYTE, &count);
            if (st[p].MPI_SOURCE != p || st[p].MPI_TAG != 9 || count != (int)n)
                fail("all-to-all: the message from %d: source %d tag %d count %d (want %zu)", p, st[p].MPI_SOURCE, st[p].MPI_TAG,
                     count, n);
            /* pattern(src, dst = this rank, tag, seq, i): the sender filled pattern(itself, us, 9, 0, i) */
            rb_check(&rb[p], p, 9, 0, n, "all-to-all message received long after it was sent");
            rb_free(&rb[p]);
            mk_free(host_mode ? MK_MALLOC : MK_DEV, sb[p]);
        }
        nmsg += size;
        if (!host_mode) ndev += size;
        free(st);
        free(rb);
        free(sb);
        free(q);
    }
    long tot[3] = {nmsg, ndev, failures}, sum[3];
    MPI_Allreduce(tot, sum, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    nm_stats_view_t sv = gpu_stats("Isend");
    if (rank == 0)
        printf("gpu_p2p: %d ranks, %d rounds, seed %llu, %ld messages (%ld from device buffers), %ld failure(s)%s; "
               "rank 0 MPI_Isend routes: staged %lld\n",
               size, rounds, (unsigned long long)seed, sum[0], sum[1], sum[2], host_mode ? " (--host)" : "",
               sv.calls == (unsigned long long)-1 ? -1LL : (long long)sv.route[NCCLMPI_ROUTE_STAGED]);
    MPI_Comm_free(&c);
    free(all);
    free(nall);
    MPI_Finalize();
    return sum[2] ? 1 : 0;
}
