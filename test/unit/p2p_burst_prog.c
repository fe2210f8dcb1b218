/* p2p_burst_prog: bursts of nonblocking point-to-point calls on device buffers of the stand-in
 * CUDA driver (test/unit/fake_cuda.c; its device memory is host memory, so the program fills and
 * checks it directly), run by test/unit/p2p_burst.sh with envelopes off, in the host test mode and
 * in device mode (also with the stand-in's CUDA IPC and kernels, where the payloads of a burst are
 * copied by copy-kernel launches). Each rank exchanges a burst of messages with its ring neighbours and itself:
 * small ones (staged: nonblocking sends wait in ncclmpi's send queue until the next call that may
 * wait, the first two of a burst copied at their calls, the later ones at the flush), some with a
 * send buffer off 16-byte alignment, one in a non-contiguous datatype, one in a contiguous derived
 * datatype freed right after the call, one synchronous-mode send, one request freed with
 * MPI_Request_free, and a large one (an envelope where they are on); then 80 sends of 8800 bytes
 * to itself, each sent before the next, before their receives. Receive buffers poisoned;
 * every status, count and byte checked, errors returned (MPI_ERRORS_RETURN) and printed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stand_in.h"

enum { NMSG = 9, ITERS = 4, BIG = 3000, SLOT = 16384 };  /* BIG ints: 12000 bytes */
enum { NUNEX = 80, UNEX = 2200 };  /* unexpected sends to itself: 8800 bytes each (envelopes) */

static int rank, size, failures;

static int val(int from, int it, int k, int i) { return from * 1000003 + it * 10007 + k * 101 + i; }

/* message k of a burst: its length in ints */
static int len_of(int it, int k) { return k == NMSG - 1 ? BIG : 1 + (7 * k + 13 * it) % 40; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CUdeviceptr b[2 * NMSG + 1];
    if (!stand_in_driver("p2p_burst_prog", 2 * NMSG + 1, SLOT * sizeof(int), b)) {
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *sb[NMSG], *rb[NMSG], *freed_sb = (int *)(uintptr_t)b[2 * NMSG];
    for (int k = 0; k < NMSG; k++) {
        sb[k] = (int *)(uintptr_t)b[k];
        rb[k] = (int *)(uintptr_t)b[NMSG + k];
    }
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int it = 0; it < ITERS; it++) {
        /* message k goes to dest(k) with tag k; it comes from src(k) */
        int dest[NMSG], src[NMSG];
        for (int k = 0; k < NMSG; k++) {
            dest[k] = k % 3 == 0 ? right : k % 3 == 1 ? left : rank;
            src[k] = k % 3 == 0 ? left : k % 3 == 1 ? right : rank;
        }
        MPI_Request q[2 * NMSG + 1], fr = MPI_REQUEST_NULL;
        MPI_Status st[2 * NMSG + 1];
        for (int k = 0; k < NMSG; k++) {
            memset(rb[k], 0xa5, SLOT * sizeof(int));
            MPI_Irecv(rb[k], len_of(it, k), MPI_INT, src[k], k, MPI_COMM_WORLD, &q[k]);
        }
        int fv = 0;
        MPI_Irecv(&fv, 1, MPI_INT, left, 99, MPI_COMM_WORLD, &q[2 * NMSG]);  /* (the freed send's) */
        for (int k = 0; k < NMSG; k++) {
            const int n = len_of(it, k), skew = k == 4 ? 1 : 0;  /* message 4: 4 bytes off alignment */
            int *s = sb[k] + skew;
            if (k == 5) {  /* every other int of 2n */
                for (int i = 0; i < n; i++) s[2 * i] = val(rank, it, k, i), s[2 * i + 1] = -1;
                MPI_Datatype strided;
                MPI_Type_vector(n, 1, 2, MPI_INT, &strided);
                MPI_Type_commit(&strided);
                MPI_Isend(s, 1, strided, dest[k], k, MPI_COMM_WORLD, &q[NMSG + k]);
                MPI_Type_free(&strided);
                continue;
            }
            for (int i = 0; i < n; i++) s[i] = val(rank, it, k, i);
            if (k == 6) {  /* a contiguous derived type, freed at once */
                MPI_Datatype one;
                MPI_Type_contiguous(n, MPI_INT, &one);
                MPI_Type_commit(&one);
                MPI_Isend(s, 1, one, dest[k], k, MPI_COMM_WORLD, &q[NMSG + k]);
                MPI_Type_free(&one);
            } else if (k == 3) {
                MPI_Issend(s, n, MPI_INT, dest[k], k, MPI_COMM_WORLD, &q[NMSG + k]);
            } else {
                MPI_Isend(s, n, MPI_INT, dest[k], k, MPI_COMM_WORLD, &q[NMSG + k]);
            }
            if (k == 2) {  /* one more, its request freed */
                freed_sb[0] = val(rank, it, 99, 0);
                MPI_Isend(freed_sb, 1, MPI_INT, right, 99, MPI_COMM_WORLD, &fr);
                MPI_Request_free(&fr);
            }
        }
        int rc = MPI_Waitall(2 * NMSG + 1, q, st);
        if (rc != MPI_SUCCESS) {
            failures++;
            for (int k = 0; k < 2 * NMSG + 1; k++) {
                char m[MPI_MAX_ERROR_STRING];
                int l = 0;
                MPI_Error_string(st[k].MPI_ERROR, m, &l);
                if (st[k].MPI_ERROR != MPI_SUCCESS) printf("rank %d iteration %d request %d: %s\n", rank, it, k, m);
            }
        }
        for (int k = 0; k < NMSG; k++) {
            const int n = len_of(it, k);
            int cnt = -1, bad = -1;
            MPI_Get_count(&st[k], MPI_INT, &cnt);
            for (int i = 0; i < n && bad < 0; i++)
                if (rb[k][i] != val(src[k], it, k, i)) bad = i;
            const unsigned char *after = (const unsigned char *)(rb[k] + n);
            if (cnt != n || st[k].MPI_SOURCE != src[k] || st[k].MPI_TAG != k || bad >= 0 || after[0] != 0xa5) {
                failures++;
                printf("rank %d iteration %d message %d (%d ints from %d): count %d, source %d, tag %d, int %d is %d (want %d), "
                       "the byte after %s\n", rank, it, k, n, src[k], cnt, st[k].MPI_SOURCE, st[k].MPI_TAG, bad,
                       bad < 0 ? 0 : rb[k][bad], bad < 0 ? 0 : val(src[k], it, k, bad), after[0] == 0xa5 ? "kept" : "written");
            }
        }
        if (fv != val(left, it, 99, 0)) {
            failures++;
            printf("rank %d iteration %d: the freed request's message is %d (want %d)\n", rank, it, fv, val(left, it, 99, 0));
        }
        MPI_Barrier(MPI_COMM_WORLD);  /* (the freed send's buffer is reused next iteration) */
    }
    /* more sends to itself than a pool has copy events (64), each sent at once (an MPI_Iprobe
     * after it: a call that may wait sends the queue), before any receive: each envelope keeps
     * its event until its payload is released, so the later sends find none and wait for their
     * copies (the receives then come in the opposite order) */
    {
        CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
        CUdeviceptr big = 0, rbig = 0;
        if (!alloc || alloc(&big, (size_t)NUNEX * UNEX * sizeof(int)) || alloc(&rbig, UNEX * sizeof(int))) {
            failures++;
            printf("rank %d: no stand-in memory for the unexpected sends\n", rank);
        } else {
            int *s = (int *)(uintptr_t)big, *r = (int *)(uintptr_t)rbig;
            MPI_Request sq[NUNEX];
            for (int k = 0; k < NUNEX; k++) {
                int flag = 0;
                for (int i = 0; i < UNEX; i++) s[k * UNEX + i] = val(rank, 7, k, i);
                MPI_Isend(s + k * UNEX, UNEX, MPI_INT, rank, 200 + k, MPI_COMM_WORLD, &sq[k]);
                MPI_Iprobe(rank, 1000, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            }
            for (int k = NUNEX; k-- > 0;) {
                memset(r, 0xa5, UNEX * sizeof(int));
                MPI_Status st1;
                int cnt = -1, bad = -1;
                MPI_Recv(r, UNEX, MPI_INT, rank, 200 + k, MPI_COMM_WORLD, &st1);
                MPI_Get_count(&st1, MPI_INT, &cnt);
                for (int i = 0; i < UNEX && bad < 0; i++)
                    if (r[i] != val(rank, 7, k, i)) bad = i;
                if (cnt != UNEX || bad >= 0) {
                    failures++;
                    printf("rank %d: unexpected send %d: count %d, int %d wrong\n", rank, k, cnt, bad);
                }
            }
            if (MPI_Waitall(NUNEX, sq, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
                failures++;
                printf("rank %d: the unexpected sends failed\n", rank);
            }
        }
    }
    /* P2P_BURST_KERNELS=1 (the stand-in runs kernels): the payload copies of the bursts went by
     * copy-kernel launches, on every rank */
    const char *ek = getenv("P2P_BURST_KERNELS");
    const unsigned long *launches = (const unsigned long *)dlsym(RTLD_DEFAULT, "fake_cuda_kernel_launches");
    if (ek && *ek == '1' && (!launches || *launches == 0)) {
        failures++;
        printf("rank %d: no copy kernel ran (the stand-in counted %lu launches)\n", rank, launches ? *launches : 0ul);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("p2p_burst_prog: %s (%d ranks, %d failures)\n", all ? "FAIL" : "ok", size, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
