/* p2p_threads: MPI_THREAD_MULTIPLE, two threads per rank, each on its own communicator, rank 0
 * sending ITERS messages of 2048 ints per thread to rank 1, which receives them with MPI_Irecv +
 * MPI_Wait (thread 0) or MPI_Irecv + MPI_Test loops (thread 1) and checks every element. With
 * point-to-point envelopes (NCCLMPI_P2P_ENVELOPE=host, NCCLMPI_P2P_ENVELOPE_MIN=1024) every
 * message is an envelope whose receive decodes it: a request the real MPI freed in one thread and
 * handed to the other at once must not get the other's decoding. Every fourth message of a thread
 * is received into half the room (MPI_ERR_TRUNCATE, errors returned), the threads' truncations
 * interleaved: a failure must reach the Wait or Test of its own request, never the other thread's
 * (whose request may have the handle the real MPI just freed). Passes under plain MPI too. */
#include "common.h" /* (first: it sets _GNU_SOURCE) */

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 2048, ITERS = 3000 };
static int rank, failures[2];
static MPI_Comm comms[2];

static void *run(void *arg)
{
    const int t = (int)(long)arg;
    int *buf = malloc(N * sizeof(int));
    for (int it = 0; it < ITERS; it++) {
        const int salt = (t + 1) * 1000003 + it * 7;
        if (rank == 0) {
            for (int i = 0; i < N; i++) buf[i] = salt + i;
            MPI_Request q;
            MPI_Isend(buf, N, MPI_INT, 1, it & 1023, comms[t], &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            const int trunc = it % 4 == 1 + t;  /* this receive has room for half the message */
            for (int i = 0; i < N; i++) buf[i] = -1;
            MPI_Request q;
            MPI_Status st;
            MPI_Irecv(buf, trunc ? N / 2 : N, MPI_INT, 0, it & 1023, comms[t], &q);
            int rc;
            if (t == 0) {
                rc = MPI_Wait(&q, &st);
            } else {
                int done = 0;
                do rc = MPI_Test(&q, &done, &st);
                while (rc == MPI_SUCCESS && !done);
            }
            int cls = -1;
            MPI_Error_class(rc, &cls);
            if (cls != (trunc ? MPI_ERR_TRUNCATE : MPI_SUCCESS)) {
                if (failures[t]++ < 5)
                    fprintf(stderr, "[rank 1 thread %d] iteration %d: error class %d, expected %d\n", t, it, cls,
                            trunc ? MPI_ERR_TRUNCATE : MPI_SUCCESS);
                continue;
            }
            if (trunc) continue;
            int count = -1;
            MPI_Get_count(&st, MPI_INT, &count);
            int bad = count == N ? -1 : N;
            for (int i = 0; i < N && bad < 0; i++)
                if (buf[i] != salt + i) bad = i;
            if (bad >= 0 && failures[t]++ < 5)
                fprintf(stderr, "[rank 1 thread %d] iteration %d: count %d, element %d is %d, expected %d\n", t, it, count,
                        bad, bad < N ? buf[bad] : -1, salt + (bad < N ? bad : 0));
        }
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    int size = 0;
    if (!tu_init_multiple(&argc, &argv, 1, &rank, &size)) return 77;
    for (int t = 0; t < 2; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
        MPI_Comm_set_errhandler(comms[t], MPI_ERRORS_RETURN);
    }
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, run, (void *)(long)t);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    int mine = failures[0] + failures[1], total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int t = 0; t < 2; t++) MPI_Comm_free(&comms[t]);
    if (rank == 0) printf("p2p_threads: %d ranks, %d failure(s)\n", size, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
