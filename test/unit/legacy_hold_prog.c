/* legacy_hold_prog: nonblocking device calls while the application holds the legacy stream, on the
 * stand-in CUDA driver (test/unit/fake_cuda.c, FAKE_CUDA_ASYNC=1; its device memory is host
 * memory, so the program fills and checks it directly), run by test/unit/legacy_hold.sh with
 * device envelopes over the stand-in's CUDA IPC. Each round: every rank posts a receive from its
 * left neighbour and a send to its right one (device buffers of 64 KiB: envelopes), then queues
 * work on the legacy stream that waits for the host (fake_cuda_hold_legacy, as a kernel waiting
 * for a flag the host sets after MPI_Waitall), then MPI_Waitall. The sends' and receives' copies
 * follow what the legacy stream held at their calls, not what was queued after them, so the
 * Waitall must return without that work: a host wait for the legacy stream inside it would wait
 * until a timer releases the work (HOLD_S seconds), which fails the round. Round 0 is each rank's
 * first receive from its neighbour's pool (its head, the copy events' handles, read then), later
 * rounds reuse the mapping. Rounds 3 and 4 receive the same message into a device buffer through
 * a vector type (every other int: the payload goes through a host copy) and into host memory;
 * round 5 sends 400 bytes (staged: through pinned host memory and the real MPI); round 6 makes two
 * MPI_Iallreduce instead (on the stand-in NCCL, after a blocking one made its communicator), the
 * second queued behind the first; round 7 an MPI_Iallgather on a fresh duplicate (staged: no NCCL
 * side yet); round 8 an MPI_Imrecv of a message MPI_Improbe found; round 11 persistent
 * MPI_Send_init/MPI_Recv_init started together; round 12 an MPI_Ialltoall (NCCL). Where the MPI has
 * the MPI-4 calls (LEGACY_HOLD_MPI4): round 9 an MPI_Isendrecv, round 10 a persistent
 * MPI_Allreduce_init started before the hold, round 13 partitioned communication (4 partitions,
 * each marked ready before the hold).
 * Receive buffers poisoned, every byte checked. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stand_in.h"

enum { N = 16384, SMALL = 100, HOLD_S = 8, ROUNDS = 14 };  /* ints: 64 KiB messages */
#if LEGACY_HOLD_MPI4  /* (the MPI has the MPI-4 calls: Open MPI 5) */
static const int mpi4 = 1;
#else
static const int mpi4 = 0;
#endif

/* each round's hold has a release flag of its own: the previous round's held work may not have
 * seen its release yet when the next round begins */
static volatile int release_flags[ROUNDS], timed_out, done;

static void *timer(void *arg)
{
    volatile int *release = arg;
    for (int i = 0; i < HOLD_S * 100 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); i++) usleep(10000);
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) __atomic_store_n(&timed_out, 1, __ATOMIC_RELEASE);
    __atomic_store_n(release, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int val(int from, int round, int i) { return from * 1000003 + round * 10007 + i; }

int main(int argc, char **argv)
{
    int rank, size, failures = 0;
    stand_in_mpi_init(&argc, &argv, "LEGACY_HOLD_THREADS", &rank, &size);
    CUdeviceptr b[2];
    void *drv = stand_in_driver("legacy_hold_prog", 2, 2 * N * sizeof(int), b);
    int (*hold)(volatile int *) = drv ? (int (*)(volatile int *))dlsym(drv, "fake_cuda_hold_legacy") : NULL;
    if (!hold) {
        if (drv) fprintf(stderr, "legacy_hold_prog: the stand-in driver has no fake_cuda_hold_legacy\n");
        MPI_Finalize();
        return 77;
    }
    int *sb = (int *)(uintptr_t)b[0], *drb = (int *)(uintptr_t)b[1], *hrb = malloc(N * sizeof(int));
    MPI_Datatype every_other;
    MPI_Type_vector(N, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int round = 0; round < ROUNDS; round++) {
        if (!mpi4 && (round == 9 || round == 10 || round == 13)) continue;  /* (every rank alike) */
        for (int i = 0; i < N; i++) sb[i] = val(rank, round, i);
        const int strided = round == 3, host = round == 4, stride = strided ? 2 : 1, n = round == 5 ? SMALL : N;
        int *rb = host ? hrb : drb;
        memset(rb, 0xa5, (size_t)stride * N * sizeof(int));
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Request q[2];
        const int coll = round == 6, gather = round == 7, mprobe = round == 8, sendrecv = round == 9, pers = round == 10,
                  pp2p = round == 11, a2a = round == 12, part = round == 13;
        const int m = N / size;  /* (round 12: ints per rank) */
        const int k = N / 4 / size;  /* (round 7: ints per rank) */
        MPI_Comm dup = MPI_COMM_NULL;
        q[1] = MPI_REQUEST_NULL;
        if (pp2p) {
            MPI_Recv_init(rb, n, MPI_INT, left, round, MPI_COMM_WORLD, &q[0]);
            MPI_Send_init(sb, n, MPI_INT, right, round, MPI_COMM_WORLD, &q[1]);
            MPI_Startall(2, q);
        } else if (a2a) {
            MPI_Ialltoall(sb, m, MPI_INT, rb, m, MPI_INT, MPI_COMM_WORLD, &q[0]);
        } else if (gather) {
            MPI_Comm_dup(MPI_COMM_WORLD, &dup);
            MPI_Iallgather(sb, k, MPI_INT, rb, k, MPI_INT, dup, &q[0]);
        } else if (mprobe) {
            MPI_Isend(sb, n, MPI_INT, right, round, MPI_COMM_WORLD, &q[1]);
            MPI_Message m = MPI_MESSAGE_NULL;
            for (int flag = 0; !flag;) MPI_Improbe(left, round, MPI_COMM_WORLD, &flag, &m, MPI_STATUS_IGNORE);
            MPI_Imrecv(rb, n, MPI_INT, &m, &q[0]);
#if LEGACY_HOLD_MPI4
        } else if (part) {
            MPI_Precv_init(rb, 4, N / 4, MPI_INT, left, round, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]);
            MPI_Psend_init(sb, 4, N / 4, MPI_INT, right, round, MPI_COMM_WORLD, MPI_INFO_NULL, &q[1]);
            MPI_Startall(2, q);
            MPI_Pready_range(0, 3, q[1]);
        } else if (sendrecv) {
            MPI_Isendrecv(sb, n, MPI_INT, right, round, rb, n, MPI_INT, left, round, MPI_COMM_WORLD, &q[0]);
        } else if (pers) {
            MPI_Allreduce_init(sb, rb, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]);
            MPI_Start(&q[0]);
#endif
        } else if (coll) {  /* (a blocking device collective first: it makes the communicator's NCCL side) */
            MPI_Allreduce(MPI_IN_PLACE, drb + N, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Iallreduce(sb, rb, N / 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[0]);
            MPI_Iallreduce(sb + N / 2, rb + N / 2, N / 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[1]);
        } else {
            if (strided) MPI_Irecv(rb, 1, every_other, left, round, MPI_COMM_WORLD, &q[0]);
            else MPI_Irecv(rb, n, MPI_INT, left, round, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(sb, n, MPI_INT, right, round, MPI_COMM_WORLD, &q[1]);
        }
        timed_out = done = 0;
        if (!hold(&release_flags[round])) {
            fprintf(stderr, "legacy_hold_prog: needs FAKE_CUDA_ASYNC=1\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        pthread_t t;
        pthread_create(&t, NULL, timer, (void *)&release_flags[round]);
        MPI_Request keep[2] = {q[0], q[1]};
        const int rc = MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        if (pers || pp2p || part) MPI_Request_free(&keep[0]);
        if (pp2p || part) MPI_Request_free(&keep[1]);
        if (dup != MPI_COMM_NULL) MPI_Comm_free(&dup);
        const int waited = __atomic_load_n(&timed_out, __ATOMIC_ACQUIRE);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
        pthread_join(t, NULL);
        if (rc != MPI_SUCCESS) {
            printf("legacy_hold_prog: FAIL: rank %d round %d: MPI_Waitall returned %d\n", rank, round, rc);
            failures++;
        }
        if (waited) {
            printf("legacy_hold_prog: FAIL: rank %d round %d (%s): MPI_Waitall waited for the work queued on the legacy stream "
                   "after its calls (released by the timer after %d s)\n", rank, round,
                   part ? "partitioned send and receive" : pp2p ? "persistent send and receive" : a2a ? "MPI_Ialltoall" : coll ? "two MPI_Iallreduce" : gather ? "MPI_Iallgather, staged" : mprobe ? "MPI_Imrecv" : sendrecv ? "MPI_Isendrecv"
                   : pers ? "a persistent MPI_Allreduce" : strided ? "a device receive through a vector type" : host ? "a host receive"
                   : n < N ? "a small device message" : "a device receive",
                   HOLD_S);
            failures++;
        }
        int bad = -1;
        int want = 0;
        const int nchk = gather ? k * size : a2a ? m * size : n;
        for (int i = 0; i < nchk && bad < 0; i++) {
            want = gather ? val(i / k, round, i % k) : a2a ? val(i / m, round, rank * m + i % m) : val(left, round, i);
            if (coll || pers)
                for (int r = want = 0; r < size; r++) want += val(r, round, i);
            if (rb[stride * i] != want) bad = i;
        }
        if (bad >= 0) {
            printf("legacy_hold_prog: FAIL: rank %d round %d: int %d is %d, want %d\n", rank, round, bad, rb[stride * bad], want);
            failures++;
        }
    }
    MPI_Type_free(&every_other);
    free(hrb);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("legacy_hold_prog: %s (%d ranks, %d failures)\n", all ? "FAIL" : "ok", size, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
