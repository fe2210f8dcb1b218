/* p2p_blocked_thread: MPI_THREAD_MULTIPLE, 2 ranks. On rank 0 a helper thread is blocked in
 * MPI_Recv (waiting for rank 1's reply) when the main thread calls MPI_Isend to rank 1 and then
 * waits, outside MPI, for the helper to finish; rank 1 replies only once it has received that
 * message. Legal MPI: the send was started, and the helper's wait inside the real MPI keeps it
 * progressing. ncclmpi must not hold such a send back until the sending thread's next MPI call (a
 * send queue flushed at the next call that may wait): nobody would flush it, and every rank would
 * wait for good. Cases: a small and a large message (a staged send and an envelope where those are
 * on), blocking MPI_Recv and an MPI_Irecv + MPI_Wait in the helper; and two MPI_Iallreduce back
 * to back in place of the send (which automatic coalescing must not hold back either: the peer
 * replies once its own two have completed). A hang ends in SIGALRM (exit 1). In the GPU build
 * (gpu_blocked_thread, -DNM_GPU_TEST) the buffers are in device memory. */
#include "common.h" /* (first: it sets _GNU_SOURCE) */

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* (the buffers, tu_buf_*: device memory in the GPU build) */
static int rank, failures, irecv_helper;
static const char *current = "setup";

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "p2p_blocked_thread: FAIL: a hang (alarm) in case ";
    (void)!write(2, msg, sizeof(msg) - 1);
    (void)!write(2, current, strlen(current));
    (void)!write(2, "\n", 1);
    _exit(1);
}

static void *helper(void *arg)
{
    int *reply = arg;
    if (irecv_helper) {
        MPI_Request q;
        MPI_Irecv(reply, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(reply, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return NULL;
}

static void run_case(const char *name, int n, int use_irecv)
{
    current = name;
    irecv_helper = use_irecv;
    int *h = malloc((size_t)n * sizeof(int));
    void *b = tu_buf_new((size_t)n * sizeof(int));
    MPI_Barrier(MPI_COMM_WORLD);
    alarm(20);
    if (rank == 0) {
        for (int i = 0; i < n; i++) h[i] = 31 * n + i;
        tu_buf_put(b, h, (size_t)n * sizeof(int));
        int reply = 0;
        pthread_t t;
        pthread_create(&t, NULL, helper, &reply);
        usleep(200 * 1000);  /* (the helper is blocked in the real MPI by now) */
        MPI_Request q;
        MPI_Isend(b, n, MPI_INT, 1, 1, MPI_COMM_WORLD, &q);
        pthread_join(t, NULL);  /* outside MPI: only the helper's wait can get the reply */
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        if (reply != 7 * n) {
            failures++;
            fprintf(stderr, "p2p_blocked_thread: case %s: reply %d, want %d\n", name, reply, 7 * n);
        }
    } else if (rank == 1) {
        for (int i = 0; i < n; i++) h[i] = -1;
        tu_buf_put(b, h, (size_t)n * sizeof(int));
        MPI_Recv(b, n, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        tu_buf_get(h, b, (size_t)n * sizeof(int));
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (h[i] != 31 * n + i) bad = i;
        if (bad >= 0) {
            failures++;
            fprintf(stderr, "p2p_blocked_thread: case %s: int %d is %d, want %d\n", name, bad, h[bad], 31 * n + bad);
        }
        int reply = 7 * n;
        MPI_Send(&reply, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
    }
    alarm(0);
    tu_buf_free(b);
    free(h);
}

/* two nonblocking allreduces on c issued back to back while the helper waits in the real MPI */
static void run_coll_case(MPI_Comm c)
{
    const int n = 1024;
    current = "two MPI_Iallreduce, helper in MPI_Recv";
    irecv_helper = 0;
    int *h = malloc(n * sizeof(int));
    void *s = tu_buf_new(n * sizeof(int)), *r[2] = {tu_buf_new(n * sizeof(int)), tu_buf_new(n * sizeof(int))};
    for (int i = 0; i < n; i++) h[i] = (rank + 1) * 100 + i;
    tu_buf_put(s, h, n * sizeof(int));
    MPI_Allreduce(s, r[0], n, MPI_INT, MPI_SUM, c);  /* (the communicator's first device use) */
    MPI_Barrier(MPI_COMM_WORLD);
    alarm(20);
    MPI_Request q[2];
    int reply = 0;
    pthread_t t;
    if (rank == 0) {
        pthread_create(&t, NULL, helper, &reply);
        usleep(200 * 1000);
    }
    for (int k = 0; k < 2; k++) MPI_Iallreduce(s, r[k], n, MPI_INT, MPI_SUM, c, &q[k]);
    if (rank == 0) pthread_join(t, NULL);
    MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    if (rank == 1) {
        reply = 7 * n;
        MPI_Send(&reply, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
    }
    alarm(0);
    int size = 0;
    MPI_Comm_size(c, &size);
    for (int k = 0; k < 2; k++) {
        tu_buf_get(h, r[k], n * sizeof(int));
        int bad = -1;
        for (int i = 0; i < n && bad < 0; i++)
            if (h[i] != 100 * size * (size + 1) / 2 + size * i) bad = i;
        if (bad >= 0) {
            failures++;
            fprintf(stderr, "p2p_blocked_thread: case %s: allreduce %d: int %d is %d\n", current, k, bad, h[bad]);
        }
    }
    if (rank == 0 && reply != 7 * n) {
        failures++;
        fprintf(stderr, "p2p_blocked_thread: case %s: reply %d\n", current, reply);
    }
    tu_buf_free(s);
    tu_buf_free(r[0]);
    tu_buf_free(r[1]);
    free(h);
}

int main(int argc, char **argv)
{
    int size;
    if (!tu_init_multiple(&argc, &argv, 2, &rank, &size)) return 77;
    if (!tu_buf_device("p2p_blocked_thread", rank)) {
        MPI_Finalize();
        return 77;
    }
    signal(SIGALRM, on_alarm);
    run_case("small message, helper in MPI_Recv", 2, 0);
    run_case("small message, helper in MPI_Wait", 2, 1);
    run_case("large message, helper in MPI_Recv", 1 << 18, 0);
    run_case("large message, helper in MPI_Wait", 1 << 18, 1);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    run_coll_case(c);
    MPI_Comm_free(&c);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("p2p_blocked_thread: %s\n", all ? "FAIL" : "ok");
    MPI_Finalize();
    return all ? 1 : 0;
}
