/* p2p_probe_race: MPI_THREAD_MULTIPLE, a receive in one thread while another thread's probe of the
 * same source meets a point-to-point envelope (NCCLMPI_P2P_ENVELOPE=host,
 * NCCLMPI_P2P_ENVELOPE_MIN=1024). Rank 0 sends X (4 ints, tag 2) and then Y (2048 ints, tag 1,
 * an envelope); on rank 1 thread A receives tag 2 and thread B probes tag 1, then receives it.
 * To report Y's size ncclmpi's probe takes the messages of rank 0 out of the real MPI's matching
 * up to Y, X included; thread A's receive must still get X, whichever form it takes: Recv with
 * room for X only and with room for more, Irecv + Wait, Sendrecv, Sendrecv_replace, Mprobe and
 * Improbe + Mrecv, a persistent receive. A last case sends Y with X's tag and thread B receives
 * tag 2 while thread A's MPI_Mprobe is in its window: A's Mprobe found X, B took it, A must get Y
 * (an envelope) whole.
 *
 * The window this test opens: this program defines the real MPI's receive and probe entry points
 * (PMPI_Recv, PMPI_Irecv, ...; linked with -rdynamic, they come before the MPI library's for the
 * preloaded libncclmpi) and, in thread A only, waits 300 ms in the first one its receive reaches
 * before calling the MPI library's. Thread B probes during that wait. A receive that looked at
 * ncclmpi's probe queue, found it empty and then posted its real receive after the probe took X
 * away would wait for good: every case runs under alarm(), a hang fails the test.
 * Passes under plain MPI too (there the wrappers never reach these entry points). Built with
 * NM_GPU_TEST (gpu_probe_race), every buffer is device memory. */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NX = 4, NY = 2048, ROOM = 4096, NREP = 64, TAG_X = 2, TAG_Y = 1, TAG_BACK = 3 };
enum { C_RECV_SMALL, C_RECV, C_IRECV, C_SENDRECV, C_SENDRECV_REPLACE, C_MPROBE, C_IMPROBE, C_PERSISTENT, C_MPROBE_LATER, NCASES };
static const char *names[NCASES] = {"Recv (room for X only)", "Recv", "Irecv+Wait", "Sendrecv", "Sendrecv_replace",
                                    "Mprobe+Mrecv", "Improbe+Mrecv", "Recv_init+Start+Wait",
                                    "Mprobe+Mrecv, X taken by another thread"};

static MPI_Comm comm;
static int rank, failures, current, layered;
static __thread int armed;  /* thread A, inside its receive: the first entry point reached waits */
static atomic_int in_window, window_hits;

static void window(int tag, MPI_Comm c)
{
    if (!armed || tag != TAG_X || c != comm) return;
    armed = 0;
    atomic_fetch_add(&window_hits, 1);
    atomic_store(&in_window, 1);
    usleep(300000);
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))
int PMPI_Recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *st)
{
    window(tag, c);
    return REAL(PMPI_Recv)(b, n, t, src, tag, c, st);
}
int PMPI_Irecv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request *r)
{
    window(tag, c);
    return REAL(PMPI_Irecv)(b, n, t, src, tag, c, r);
}
int PMPI_Sendrecv(const void *sb, int sn, MPI_Datatype st_, int dst, int stag, void *rb, int rn, MPI_Datatype rt, int src,
                  int rtag, MPI_Comm c, MPI_Status *st)
{
    window(rtag, c);
    return REAL(PMPI_Sendrecv)(sb, sn, st_, dst, stag, rb, rn, rt, src, rtag, c, st);
}
int PMPI_Sendrecv_replace(void *b, int n, MPI_Datatype t, int dst, int stag, int src, int rtag, MPI_Comm c, MPI_Status *st)
{
    window(rtag, c);
    return REAL(PMPI_Sendrecv_replace)(b, n, t, dst, stag, src, rtag, c, st);
}
int PMPI_Mprobe(int src, int tag, MPI_Comm c, MPI_Message *m, MPI_Status *st)
{
    window(tag, c);
    return REAL(PMPI_Mprobe)(src, tag, c, m, st);
}
int PMPI_Improbe(int src, int tag, MPI_Comm c, int *flag, MPI_Message *m, MPI_Status *st)
{
    window(tag, c);
    return REAL(PMPI_Improbe)(src, tag, c, flag, m, st);
}

static void on_alarm(int sig)
{
    (void)sig;
    char msg[128];
    int n = snprintf(msg, sizeof(msg), "p2p_probe_race: rank %d hung in case %d (%s)\n", rank, current, names[current]);
    if (write(2, msg, (size_t)n) < 0) _exit(3);
    _exit(3);
}

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[rank %d] case %s: ", rank, names[current]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

/* (the messages' buffers, tu_buf_*: device memory in the GPU build, gpu_probe_race, where the
 * receives take ncclmpi's staged route and Y travels as a device envelope) */
static int x_value(int c, int i) { return 1000 * (c + 1) + i; }
static int y_value(int c, int i) { return 77 * c + 3 * i + 1; }

/* h: what a receive of (source 0, tag) got, st its status: X (NX elements) or Y (NY), the rest of
 * the buffer (room elements) as it was (`rest`, -1000: not checked) */
static void check_msg(const char *who, const int *h, const MPI_Status *st, int c, int tag, int is_y, int room, int rest)
{
    const int n = is_y ? NY : NX;
    int count = -1;
    MPI_Get_count(st, MPI_INT, &count);
    if (st->MPI_SOURCE != 0 || st->MPI_TAG != tag || count != n)
        fail("%s: status source %d, tag %d, count %d; expected 0, %d, %d", who, st->MPI_SOURCE, st->MPI_TAG, count, tag, n);
    for (int i = 0; i < n; i++)
        if (h[i] != (is_y ? y_value(c, i) : x_value(c, i))) {
            fail("%s: element %d is %d", who, i, h[i]);
            break;
        }
    if (rest != -1000 && n < room && h[n] != rest) fail("%s: element %d is %d, expected %d", who, n, h[n], rest);
}

/* thread A: receive X the case's way */
static void *receiver(void *arg)
{
    const int c = (int)(long)arg;
    int *host = malloc(ROOM * sizeof(int));
    void *buf = tu_buf_new(ROOM * sizeof(int)), *back = tu_buf_new(NREP * sizeof(int));
    for (int i = 0; i < ROOM; i++) host[i] = -7;
    tu_buf_put(buf, host, ROOM * sizeof(int));
    for (int i = 0; i < NREP; i++) host[i] = -(i + 1);
    tu_buf_put(back, host, NREP * sizeof(int));
    if (c == C_SENDRECV_REPLACE) tu_buf_put(buf, host, NREP * sizeof(int));
    MPI_Status st;
    memset(&st, 0, sizeof(st));
    MPI_Request q = MPI_REQUEST_NULL;
    MPI_Message m = MPI_MESSAGE_NULL;
    int rc = MPI_SUCCESS, flag = 0;
    armed = 1;
    switch (c) {
    case C_RECV_SMALL: rc = MPI_Recv(buf, NX, MPI_INT, 0, TAG_X, comm, &st); break;
    case C_RECV: rc = MPI_Recv(buf, ROOM, MPI_INT, 0, TAG_X, comm, &st); break;
    case C_IRECV:
        rc = MPI_Irecv(buf, ROOM, MPI_INT, 0, TAG_X, comm, &q);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
        break;
    case C_SENDRECV: rc = MPI_Sendrecv(back, NREP, MPI_INT, 0, TAG_BACK, buf, ROOM, MPI_INT, 0, TAG_X, comm, &st); break;
    case C_SENDRECV_REPLACE:
        rc = MPI_Sendrecv_replace(buf, NREP, MPI_INT, 0, TAG_BACK, 0, TAG_X, comm, &st);
        break;
    case C_MPROBE:
        rc = MPI_Mprobe(0, TAG_X, comm, &m, &st);
        if (rc == MPI_SUCCESS) rc = MPI_Mrecv(buf, ROOM, MPI_INT, &m, &st);
        break;
    case C_IMPROBE:
        do rc = MPI_Improbe(0, TAG_X, comm, &flag, &m, &st);
        while (rc == MPI_SUCCESS && !flag);
        if (rc == MPI_SUCCESS) rc = MPI_Mrecv(buf, ROOM, MPI_INT, &m, &st);
        break;
    case C_MPROBE_LATER: {
        rc = MPI_Mprobe(0, TAG_X, comm, &m, &st);
        int n = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        if (rc == MPI_SUCCESS && n != (layered ? NY : NX)) fail("Mprobe's status counts %d", n);
        if (rc == MPI_SUCCESS) rc = MPI_Mrecv(buf, ROOM, MPI_INT, &m, &st);
        break;
    }
    case C_PERSISTENT:
        rc = MPI_Recv_init(buf, ROOM, MPI_INT, 0, TAG_X, comm, &q);
        if (rc == MPI_SUCCESS) rc = MPI_Start(&q);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
        if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
        break;
    }
    armed = 0;
    atomic_store(&in_window, 1);  /* (a path that reached no entry point above: thread B goes on) */
    tu_buf_get(host, buf, ROOM * sizeof(int));
    if (rc != MPI_SUCCESS) fail("error %d", rc);
    /* (the last case: with ncclmpi, thread B took X in A's window; without, A took it first) */
    else check_msg("thread A", host, &st, c, TAG_X, c == C_MPROBE_LATER && layered, ROOM,
                   c == C_SENDRECV_REPLACE ? -(NX + 1) : -7);
    free(host);
    tu_buf_free(buf);
    tu_buf_free(back);
    return NULL;
}

/* thread B: once thread A is inside its receive, probe Y (which takes X out of matching too) */
static void *prober(void *arg)
{
    const int c = (int)(long)arg;
    while (!atomic_load(&in_window)) usleep(1000);
    MPI_Status st;
    int count = -1;
    int *y = malloc(NY * sizeof(int));
    void *dy = tu_buf_new(NY * sizeof(int));
    for (int i = 0; i < NY; i++) y[i] = -5;
    tu_buf_put(dy, y, NY * sizeof(int));
    if (c == C_MPROBE_LATER) {  /* X, taken while thread A's Mprobe is in its window */
        if (MPI_Recv(dy, NY, MPI_INT, 0, TAG_X, comm, &st) != MPI_SUCCESS) fail("recv of X failed");
        tu_buf_get(y, dy, NY * sizeof(int));
        check_msg("thread B", y, &st, c, TAG_X, !layered, NY, -5);
    } else {
        if (MPI_Probe(0, TAG_Y, comm, &st) != MPI_SUCCESS) fail("probe failed");
        MPI_Get_count(&st, MPI_INT, &count);
        if (count != NY || st.MPI_TAG != TAG_Y) fail("probe: count %d, tag %d", count, st.MPI_TAG);
        if (MPI_Recv(dy, NY, MPI_INT, 0, TAG_Y, comm, &st) != MPI_SUCCESS) fail("recv of Y failed");
        tu_buf_get(y, dy, NY * sizeof(int));
        check_msg("thread B", y, &st, c, TAG_Y, 1, NY, -1000);
    }
    free(y);
    tu_buf_free(dy);
    return NULL;
}

int main(int argc, char **argv)
{
    int size = 0;
    if (!tu_init_multiple(&argc, &argv, 2, &rank, &size)) return 77;
    if (!tu_buf_device("p2p_probe_race", rank)) {
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    signal(SIGALRM, on_alarm);
    layered = dlsym(RTLD_DEFAULT, "ncclmpi_version") != NULL;
    /* persistent receives are ncclmpi's (and post through PMPI_Irecv) only where envelopes are on */
    const char *mode = getenv("NCCLMPI_P2P_ENVELOPE");
    const int envelopes = mode && (!strcmp(mode, "host") || !strcmp(mode, "device"));
    const int only = argc > 1 ? atoi(argv[1]) : -1;  /* (one case, by its index) */
    for (int c = 0; c < NCASES; c++) {
        if (only >= 0 && c != only) continue;
        current = c;
        alarm(20);
        atomic_store(&in_window, 0);
        atomic_store(&window_hits, 0);
        if (rank == 0) {
            int x[NX], *y = malloc(NY * sizeof(int)), back[NREP];
            void *dx = tu_buf_new(sizeof(x)), *dy = tu_buf_new(NY * sizeof(int)), *dback = tu_buf_new(sizeof(back));
            for (int i = 0; i < NX; i++) x[i] = x_value(c, i);
            for (int i = 0; i < NY; i++) y[i] = y_value(c, i);
            tu_buf_put(dx, x, sizeof(x));
            tu_buf_put(dy, y, NY * sizeof(int));
            MPI_Send(dx, NX, MPI_INT, 1, TAG_X, comm);
            MPI_Send(dy, NY, MPI_INT, 1, c == C_MPROBE_LATER ? TAG_X : TAG_Y, comm);
            if (c == C_SENDRECV || c == C_SENDRECV_REPLACE) {
                MPI_Recv(dback, NREP, MPI_INT, 1, TAG_BACK, comm, MPI_STATUS_IGNORE);
                tu_buf_get(back, dback, sizeof(back));
                for (int i = 0; i < NREP; i++)
                    if (back[i] != -(i + 1)) {
                        fail("sent part: element %d is %d", i, back[i]);
                        break;
                    }
            }
            free(y);
            tu_buf_free(dx);
            tu_buf_free(dy);
            tu_buf_free(dback);
        } else if (rank == 1) {
            pthread_t a, b;
            pthread_create(&a, NULL, receiver, (void *)(long)c);
            pthread_create(&b, NULL, prober, (void *)(long)c);
            pthread_join(a, NULL);
            pthread_join(b, NULL);
            /* with ncclmpi every case's receive reaches one of the entry points above: the window
             * was open (a case that never opened it would test nothing) */
            if (layered && (c != C_PERSISTENT || envelopes) && atomic_load(&window_hits) != 1) fail("the window opened %d times", atomic_load(&window_hits));
        }
        MPI_Barrier(comm);
        alarm(0);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&comm);
    if (rank == 0) printf("p2p_probe_race: %d cases, %d failure(s)%s\n", NCASES, total, layered ? "" : " (plain MPI)");
    MPI_Finalize();
    return total ? 1 : 0;
}
