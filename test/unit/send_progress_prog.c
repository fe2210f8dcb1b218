/* send_progress_prog: MPI's progress rule for a nonblocking device send (MPI-3.1 3.7.4: a
 * matching receive completes even if the sender makes no further MPI call), for
 * test/unit/send_progress.sh. Two ranks on the stand-in CUDA driver. For each size up to MAX
 * bytes (1 KiB: staged; 64 KiB: an envelope where envelopes are on): rank 0 MPI_Isends from
 * device memory, then sleeps 1.5 s making no MPI call, then MPI_Waits; rank 1's MPI_Recv must
 * complete before rank 0's MPI_Wait begins (CLOCK_MONOTONIC, one machine), with the right bytes.
 * Then a burst of 4 MPI_Isend inside an explicit ncclmpi group (ncclmpi_group_begin/end: the
 * sends may wait for the group's end there), received and checked.
 *   send_progress_prog [MAX]   (NCCLMPI_CUDA_LIB: the stand-in driver, already loaded) */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stand_in.h"

enum { BIG = 64 << 10, BURST = 4 };

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static unsigned char val(int i, int k) { return (unsigned char)(i * 7 + k * 13 + 1); }

static int check(const unsigned char *b, int n, int k, const char *what)
{
    for (int i = 0; i < n; i++)
        if (b[i] != val(i, k)) {
            printf("send_progress_prog: %s: byte %d = %d, want %d\n", what, i, b[i], val(i, k));
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    const int max = argc > 1 ? atoi(argv[1]) : BIG;
    CUdeviceptr bufs[BURST];
    if (!stand_in_driver("send_progress_prog", BURST, BIG, bufs)) return 2;
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) printf("send_progress_prog: needs 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    unsigned char *b = (unsigned char *)bufs[0];  /* (stand-in device memory is host memory) */
    for (int n = 1024, k = 0; n <= max; n *= 64, k++) {
        if (rank == 0) {
            for (int i = 0; i < n; i++) b[i] = val(i, k);
            MPI_Request q;
            MPI_Isend(b, n, MPI_BYTE, 1, k, MPI_COMM_WORLD, &q);
            usleep(1500000);  /* no MPI call */
            const double wait_at = mono();
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            double recv_at = 0;
            MPI_Recv(&recv_at, 1, MPI_DOUBLE, 1, 100 + k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (recv_at <= 0 || recv_at >= wait_at) {
                printf("send_progress_prog: %d bytes: the receive completed %.3f s after the sender's MPI_Wait began "
                       "(it must not wait for the sender's next MPI call)\n", n, recv_at - wait_at);
                bad = 1;
            } else {
                printf("send_progress_prog: %d bytes: received %.3f s before the sender's MPI_Wait\n", n, wait_at - recv_at);
            }
        } else {
            memset(b, 0xee, n);
            MPI_Recv(b, n, MPI_BYTE, 0, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double at = mono();
            if (check(b, n, k, "the receive")) at = -1;
            MPI_Send(&at, 1, MPI_DOUBLE, 0, 100 + k, MPI_COMM_WORLD);
        }
    }
    /* a burst in an explicit group: the sends may be held until its end */
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    MPI_Request q[BURST];
    const int n = max < BIG ? max : BIG;
    for (int j = 0; j < BURST; j++) {
        unsigned char *p = (unsigned char *)bufs[j];
        if (rank == 0)
            for (int i = 0; i < n; i++) p[i] = val(i, 10 + j);
        else
            memset(p, 0xee, n);
    }
    if (rank == 0 && gbegin) gbegin();
    for (int j = 0; j < BURST; j++) {
        if (rank == 0) MPI_Isend((void *)bufs[j], n, MPI_BYTE, 1, 200 + j, MPI_COMM_WORLD, &q[j]);
        else MPI_Irecv((void *)bufs[j], n, MPI_BYTE, 0, 200 + j, MPI_COMM_WORLD, &q[j]);
    }
    if (rank == 0 && gend) gend();
    MPI_Waitall(BURST, q, MPI_STATUSES_IGNORE);
    if (rank == 1)
        for (int j = 0; j < BURST; j++) bad |= check((unsigned char *)bufs[j], n, 10 + j, "the group's burst");
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("send_progress_prog: %s\n", all ? "FAIL" : "ok");
    MPI_Finalize();
    return all;
}
