/* mixed_kinds_prog: ranks that pass different kinds of memory to one collective, for
 * test/unit/mixed_kinds.sh. On the stand-in CUDA driver: rank 1 passes host memory, every other
 * rank the stand-in's device memory (rank 0 device; rank 2 stands for managed memory, which
 * ncclmpi takes as device memory too: the stand-in has none of its own). Without
 * NCCLMPI_AGREE=1 this breaks ncclmpi's contract (doc/design.md, "Memory kind"): the call must
 * then end in an error on every rank within NCCLMPI_TIMEOUT (the script sets it), never hang.
 *   mixed_kinds_prog allreduce|bcast|iallreduce|late [return [LINGER_S]] [warm]
 * "late": every rank device memory in an MPI_Iallreduce (staged where the ranks share the GPU),
 * rank 1 joining 60 s late: the others' MPI_Wait must end under NCCLMPI_TIMEOUT.
 * "return": MPI_ERRORS_RETURN on MPI_COMM_WORLD; each rank prints the error it got
 * ("mixed_kinds_prog: rank R: MPI_X failed: <text>") and exits LINGER_S seconds later (so that
 * a rank still waiting inside the real MPI can end its own wait before the job is stopped).
 * "warm": first one device MPI_Allreduce on every rank (the communicator's NCCL side is made
 * with every rank agreeing), so that the mixed call meets a made one.
 * With NCCLMPI_AGREE=1: "mixed_kinds_prog: ok" when every rank's result is right.
 * (NCCLMPI_CUDA_LIB: the stand-in driver, already loaded) */
#define _GNU_SOURCE
#include <cuda.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stand_in.h"

enum { N = 1024 };

static double linger;

static int report(int rc, int rank, const char *call)
{
    if (rc == MPI_SUCCESS) return 0;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    /* (on stderr: Open MPI 5's launcher drops what a rank wrote to stdout, when stdout is a file,
     * once another rank aborts the job) */
    fprintf(stderr, "mixed_kinds_prog: rank %d: MPI_%s failed: %s\n", rank, call, s);
    fflush(stderr);
    for (const double t = MPI_Wtime(); MPI_Wtime() - t < linger;) usleep(100000);  /* (signals cut a sleep short) */
    return 1;
}

int main(int argc, char **argv)
{
    const char *call = argc > 1 ? argv[1] : "allreduce";
    CUdeviceptr bufs[2];
    if (!stand_in_driver("mixed_kinds_prog", 2, N * sizeof(int), bufs)) return 2;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int warm = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "return")) {
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            if (i + 1 < argc && atof(argv[i + 1]) > 0) linger = atof(argv[++i]);
        }
        warm |= !strcmp(argv[i], "warm");
    }
    if (warm) {  /* every rank on device memory: the communicator's NCCL side is made, agreed */
        int *a = (int *)bufs[0], *b = (int *)bufs[1];
        for (int i = 0; i < N; i++) a[i] = i;
        if (report(MPI_Allreduce(a, b, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD), rank, "Allreduce (warm)")) return 1;
        for (int i = 0; i < N; i++)
            if (b[i] != size * i) {
                printf("mixed_kinds_prog: rank %d: the warm-up allreduce is wrong at %d\n", rank, i);
                return 1;
            }
    }
    const int late = !strcmp(call, "late"), host = rank == 1 && !late;
    int *in = host ? malloc(N * sizeof(int)) : (int *)bufs[0];
    int *out = host ? malloc(N * sizeof(int)) : (int *)bufs[1];
    for (int i = 0; i < N; i++) in[i] = rank * 7 + i, out[i] = -1;  /* (stand-in device memory is host memory) */
    int rc, bad = 0;
    const double t0 = MPI_Wtime();
    if (!strcmp(call, "bcast")) {
        if (rank != 0) memcpy(in, out, N * sizeof(int));
        rc = MPI_Bcast(in, N, MPI_INT, 0, MPI_COMM_WORLD);
        if (report(rc, rank, "Bcast")) return 1;  /* (a failed MPI: no MPI_Finalize) */
        for (int i = 0; i < N && !bad; i++) bad = in[i] != i;
    } else {
        MPI_Request q;
        const int nb = !strcmp(call, "iallreduce") || late;
        if (late && rank == 1) sleep(60);
        rc = nb ? MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q)
                : MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS && nb) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        if (report(rc, rank, nb ? "Iallreduce" : "Allreduce")) return 1;
        for (int i = 0; i < N && !bad; i++) bad = out[i] != 7 * size * (size - 1) / 2 + size * i;
    }
    /* a blocking collective on host memory (ranks whose device collective left the communicator
     * to be made at the next blocking one make it here) */
    int all = 0;
    rc = MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (report(rc, rank, "Allreduce (the check)")) return 1;
    if (rank == 0) printf("mixed_kinds_prog: %s after %.1f s\n", all ? "FAIL" : "ok", MPI_Wtime() - t0);
    MPI_Finalize();
    return all;
}
