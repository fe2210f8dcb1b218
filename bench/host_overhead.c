/* host_overhead: N host-buffer MPI calls of one kind, for measuring what libncclmpi adds to a
 * call it passes through to the real MPI. A singleton (no mpirun), not linked with ncclmpi: run
 * it plain and with LD_PRELOAD=libncclmpi.so. bench/host_overhead.sh drives it.
 *
 *   host_overhead N [KIND] [--time]
 *     KIND   allreduce  MPI_Allreduce, count 1 MPI_INT, MPI_SUM, MPI_COMM_SELF   (DATA path)
 *            send       MPI_Send, count 1, to MPI_PROC_NULL                       (DATA path)
 *            test       MPI_Test on MPI_REQUEST_NULL                              (PROGRESS path)
 *            iprobe     MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF)    (PASS path)
 *            wait       MPI_Wait on MPI_REQUEST_NULL                              (WAIT path)
 *            sendrecv   MPI_Sendrecv of 1 MPI_INT to the rank itself on MPI_COMM_SELF (DATA path)
 *            irecv      MPI_Irecv of 1 MPI_INT from the rank itself, MPI_Send to it, MPI_Wait
 *            sendrecv1k, irecv1k  the same with 256 MPI_INT (1 KiB: with point-to-point envelopes
 *                       on, a receive with room for an envelope, which decodes what it gets)
 *            all        each of the above in turn (default)
 *     --time  also time the N calls with clock_gettime and print ns/call per kind
 *
 * The N calls of a kind run inside hb_loop() (never inlined), so that
 * `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=hb_loop` counts exactly the
 * instructions of the calls (MPI_Init/Finalize, whose counts vary from run to run, excluded).
 *
 * Output, one line per kind:  kind=<k> n=<N> ncclmpi=<0|1> counted=<c> [ns_per_call=<t>]
 *   ncclmpi  1 when libncclmpi is in the process (looked up with dlsym)
 *   counted  calls of MPI_<kind> that ncclmpi counted (ncclmpi_get_stats), -1 without ncclmpi;
 *            lets the driver check that the preloaded library really intercepted the calls
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K_ALLREDUCE, K_SEND, K_TEST, K_IPROBE, K_WAIT, K_SENDRECV, K_IRECV, K_SENDRECV1K, K_IRECV1K, K_COUNT };
static const char *const kind_name[K_COUNT] = {"allreduce", "send",  "test",       "iprobe", "wait",
                                               "sendrecv",  "irecv", "sendrecv1k", "irecv1k"};
static const char *const kind_fn[K_COUNT] = {"Allreduce", "Send", "Test", "Iprobe", "Wait", "Sendrecv", "Irecv", "Sendrecv", "Irecv"};
enum { BIG = 256 };
static int big_in[BIG], big_out[BIG];

/* the layout of ncclmpi_stats_t (include/ncclmpi.h), repeated so the program needs no ncclmpi */
typedef struct {
    unsigned long long calls, fortran_calls, route[4];
} hb_stats_t;

static int hb_errors;

__attribute__((noinline)) void hb_loop(int kind, long n)
{
    int in = 1, out = 0, flag = 0;
    MPI_Request req;
    switch (kind) {
    case K_ALLREDUCE:
        for (long i = 0; i < n; i++)
            if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF) != MPI_SUCCESS) hb_errors++;
        break;
    case K_SEND:
        for (long i = 0; i < n; i++)
            if (MPI_Send(&in, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD) != MPI_SUCCESS) hb_errors++;
        break;
    case K_TEST:
        for (long i = 0; i < n; i++) {
            req = MPI_REQUEST_NULL;
            if (MPI_Test(&req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) hb_errors++;
        }
        break;
    case K_IPROBE:
        for (long i = 0; i < n; i++)
            if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag)
                hb_errors++;
        break;
    case K_WAIT:
        for (long i = 0; i < n; i++) {
            req = MPI_REQUEST_NULL;
            if (MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS) hb_errors++;
        }
        break;
    case K_SENDRECV: /* a message to the rank itself: a send and a receive that gets a message */
        for (long i = 0; i < n; i++)
            if (MPI_Sendrecv(&in, 1, MPI_INT, 0, 0, &out, 1, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE) != MPI_SUCCESS)
                hb_errors++;
        break;
    case K_SENDRECV1K:
        for (long i = 0; i < n; i++) {
            big_out[BIG - 1] = 0;
            if (MPI_Sendrecv(big_in, BIG, MPI_INT, 0, 0, big_out, BIG, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE) !=
                    MPI_SUCCESS ||
                big_out[BIG - 1] != BIG)
                hb_errors++;
        }
        break;
    case K_IRECV1K:
        for (long i = 0; i < n; i++) {
            big_out[BIG - 1] = 0;
            if (MPI_Irecv(big_out, BIG, MPI_INT, 0, 0, MPI_COMM_SELF, &req) != MPI_SUCCESS ||
                MPI_Send(big_in, BIG, MPI_INT, 0, 0, MPI_COMM_SELF) != MPI_SUCCESS || MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
                big_out[BIG - 1] != BIG)
                hb_errors++;
        }
        break;
    case K_IRECV: /* MPI_Irecv from the rank itself, MPI_Send to it, MPI_Wait: the three calls */
        for (long i = 0; i < n; i++) {
            out = 0;
            if (MPI_Irecv(&out, 1, MPI_INT, 0, 0, MPI_COMM_SELF, &req) != MPI_SUCCESS ||
                MPI_Send(&in, 1, MPI_INT, 0, 0, MPI_COMM_SELF) != MPI_SUCCESS || MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
                out != 1)
                hb_errors++;
        }
        break;
    }
    if ((kind == K_ALLREDUCE || kind == K_SENDRECV) && n > 0 && out != 1) hb_errors++;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void usage(void)
{
    fprintf(stderr, "usage: host_overhead N [allreduce|send|test|iprobe|wait|sendrecv|irecv|sendrecv1k|irecv1k|all] [--time]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long n = -1;
    int first = 0, last = K_COUNT - 1, timed = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--time")) {
            timed = 1;
        } else if (n < 0) {
            char *end;
            n = strtol(argv[a], &end, 10);
            if (*end || n < 0) usage();
        } else if (strcmp(argv[a], "all") != 0) {
            int k = 0;
            while (k < K_COUNT && strcmp(argv[a], kind_name[k]) != 0) k++;
            if (k == K_COUNT) usage();
            first = last = k;
        }
    }
    if (n < 0) usage();

    for (int i = 0; i < BIG; i++) big_in[i] = i + 1;
    MPI_Init(&argc, &argv);
    int (*get_stats)(const char *, hb_stats_t *) =
        (int (*)(const char *, hb_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    for (int k = first; k <= last; k++) {
        hb_stats_t s0 = {0}, s1 = {0};
        if (get_stats) get_stats(kind_fn[k], &s0);
        double t = 0;
        if (timed) {
            hb_loop(k, n < 1000 ? n : 1000); /* warm-up: lazy binding, first-call work, caches */
            if (get_stats) get_stats(kind_fn[k], &s0);
            t = now_ns();
        }
        hb_loop(k, n);
        if (timed) t = now_ns() - t;
        if (get_stats) get_stats(kind_fn[k], &s1);
        printf("kind=%s n=%ld ncclmpi=%d counted=%lld", kind_name[k], n, get_stats != NULL,
               get_stats ? (long long)(s1.calls - s0.calls) : -1LL);
        if (timed) printf(" ns_per_call=%.2f", n ? t / (double)n : 0.0);
        printf("\n");
    }
    MPI_Finalize();
    if (hb_errors) fprintf(stderr, "host_overhead: %d calls failed or returned wrong results\n", hb_errors);
    return hb_errors ? 1 : 0;
}
