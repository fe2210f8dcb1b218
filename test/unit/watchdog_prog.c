/* watchdog_prog: device-buffer calls that wait for a late peer, for test/unit/watchdog.sh. Two
 * ranks on the stand-in CUDA driver (test/unit/fake_cuda.c: both ranks see the same "GPU", so
 * ncclmpi stages their device collectives through the real MPI). Rank 1 joins each of the two
 * waited-for calls 2.5 s late: a blocking MPI_Allreduce (rank 0 waits inside the real MPI) and an
 * MPI_Iallreduce + MPI_Wait (rank 0 waits in ncclmpi's MPI_Wait); rank 0 joins a third late, a
 * collective file write from device memory in rank order (MPI_File_write_ordered, staged: rank 1
 * waits in the real MPI's call). Every result is checked.
 * With "kill", rank 1 SIGKILLs itself instead, and rank 0's MPI_Allreduce waits for good.
 *   watchdog_prog [DELAY_S] [kill]     (NCCLMPI_CUDA_LIB: the stand-in driver, already loaded) */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stand_in.h"

enum { N = 16 };

static int check(const int *v, int size, const char *what, int rank)
{
    for (int i = 0; i < N; i++) {
        const int want = size * (size - 1) / 2 + size * i;
        if (v[i] != want) {
            fprintf(stderr, "watchdog_prog: rank %d: %s: element %d = %d, want %d\n", rank, what, i, v[i], want);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const double delay = argc > 1 ? atof(argv[1]) : 2.5;
    CUdeviceptr bufs[3];
    if (!stand_in_driver("watchdog_prog", 3, N * sizeof(int), bufs)) return 2;
    const CUdeviceptr a = bufs[0], b = bufs[1];
    /* the stand-in's device memory is host memory: written and read directly */
    int *in = (int *)a, *out = (int *)b;
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 0; i < N; i++) in[i] = rank + i;
    /* settles the communicator (its ranks share the "GPU": staged) with no one late */
    MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= check(out, size, "first MPI_Allreduce", rank);
    for (int i = 0; i < N; i++) out[i] = -1;
    if (argc > 2 && !strcmp(argv[2], "kill") && rank == 1) {
        fflush(stdout);
        raise(SIGKILL);
    }
    if (rank == 1) usleep((useconds_t)(delay * 1e6));
    MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= check(out, size, "MPI_Allreduce with a late peer", rank);
    for (int i = 0; i < N; i++) out[i] = -1;
    if (rank == 1) usleep((useconds_t)(delay * 1e6));
    MPI_Request q;
    MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    bad |= check(out, size, "MPI_Iallreduce + MPI_Wait with a late peer", rank);
    /* a collective file write from device memory in rank order, staged; rank 0 is late this
     * time, so rank 1 waits in the real MPI's call for its place in the order; then each rank
     * reads its neighbour's block back into device memory (sync, barrier, sync: MPI-IO's rule
     * for seeing another process's writes) */
    char path[512];
    if (rank == 0) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/nm_watchdog_%d.dat", dir && *dir ? dir : "/tmp", (int)getpid());
    }
    MPI_Bcast(path, (int)sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &fh) !=
        MPI_SUCCESS) {
        fprintf(stderr, "watchdog_prog: rank %d: cannot open %s\n", rank, path);
        bad = 1;
    } else {
        for (int i = 0; i < N; i++) out[i] = -1;
        if (rank == 0) usleep((useconds_t)(delay * 1e6));
        MPI_File_write_ordered(fh, in, N, MPI_INT, MPI_STATUS_IGNORE);
        MPI_File_sync(fh);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_sync(fh);
        const int from = (rank + 1) % size;
        MPI_File_read_at_all(fh, (MPI_Offset)from * N * sizeof(int), out, N, MPI_INT, MPI_STATUS_IGNORE);
        for (int i = 0; i < N; i++)
            if (out[i] != from + i) {
                fprintf(stderr, "watchdog_prog: rank %d: file block of rank %d, element %d = %d, want %d\n", rank, from, i,
                        out[i], from + i);
                bad = 1;
                break;
            }
        MPI_File_close(&fh);
    }
    /* one-sided on device memory (the stand-in's CUDA IPC, FAKE_CUDA_IPC=1): rank 0 exposes its
     * window to rank 1 late, so rank 1's put waits for the post; rank 1's put from
     * device memory must be in rank 0's window after MPI_Win_wait */
    int *wmem = (int *)bufs[2];
    for (int i = 0; i < N; i++) wmem[i] = -1;
    MPI_Win win;
    MPI_Group wg, peer;
    const int other = 1 - rank;
    const char *ipc = getenv("FAKE_CUDA_IPC");
    const int epoch = size == 2 && ipc && *ipc == '1';  /* (the script sets it where the stand-in's IPC works) */
    if (epoch && MPI_Win_create(wmem, N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win) == MPI_SUCCESS) {
        MPI_Win_get_group(win, &wg);
        MPI_Group_incl(wg, 1, &other, &peer);
        if (rank == 0) {
            usleep((useconds_t)(delay * 1e6));
            MPI_Win_post(peer, 0, win);
            MPI_Win_wait(win);
            for (int i = 0; i < N; i++)
                if (wmem[i] != 1 + i) {
                    fprintf(stderr, "watchdog_prog: rank 0: window element %d = %d, want %d\n", i, wmem[i], 1 + i);
                    bad = 1;
                    break;
                }
        } else {
            MPI_Win_start(peer, 0, win);
            MPI_Put(in, N, MPI_INT, 0, 0, N, MPI_INT, win);
            MPI_Win_complete(win);
        }
        MPI_Group_free(&peer);
        MPI_Group_free(&wg);
        MPI_Win_free(&win);
    } else if (epoch) {
        fprintf(stderr, "watchdog_prog: rank %d: MPI_Win_create on device memory failed\n", rank);
        bad = 1;
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("watchdog_prog: %s\n", all ? "FAIL" : "ok");
    MPI_Finalize();
    return all;
}
