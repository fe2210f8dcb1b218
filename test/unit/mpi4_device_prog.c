/* mpi4_device_prog: the MPI-4 calls of the table (the |MPI4 rows of src/interpose/mpi_api.def) on
 * device buffers of the stand-in CUDA driver (test/unit/fake_cuda.c; its device memory is host
 * memory, so the program fills and checks it directly), run by test/unit/mpi4_device.sh:
 *   MPI_Isendrecv, MPI_Isendrecv_replace   around the ring and with the rank itself, device and
 *                                          host buffers mixed: every byte against PMPI_Sendrecv
 *                                          (_replace) on host copies, statuses, the staged route
 *   persistent collectives, persistent neighbourhood collectives, MPI_Psend_init, MPI_Precv_init
 *                                          on device buffers: MPI_ERR_UNSUPPORTED_OPERATION through
 *                                          the communicator's handler (MPI_ERRORS_RETURN), a message
 *                                          naming the call, the request MPI_REQUEST_NULL, the real
 *                                          MPI never called (its output buffers untouched); the same
 *                                          calls on host buffers in this process work (Allreduce_init
 *                                          started against PMPI_Allreduce)
 * Prints "mpi4_device_prog: ok" when every check passed.
 */
#include <mpi.h>
#include <ncclmpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "stand_in.h"

enum { N = 1000, NBUF = 4 };
static int rank, size, failures;

#define FAIL(...)                                  \
    do {                                           \
        failures++;                                \
        printf("rank %d: ", rank);                 \
        printf(__VA_ARGS__);                       \
        printf("\n");                              \
    } while (0)

static int val(int from, int round, int i) { return from * 1000003 + round * 10007 + i + 1; }

static unsigned long long route_calls(const char *fn, int route)
{
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    ncclmpi_stats_t st;
    return get && get(fn, &st) == 0 ? st.route[route] : 0;
}

/* device or host, by bit k of mask */
static int *pick(int **dev, int **host, int mask, int k) { return (mask >> k) & 1 ? dev[k] : host[k]; }

static void t_isendrecv(MPI_Comm c, int **dev, int **host)
{
    static int ref[N], hs[N];
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int mask = 0; mask < 4; mask++)
        for (int self = 0; self < 2; self++) {
            const int to = self ? rank : next, from = self ? rank : prev, round = 2 * mask + self;
            int *s = pick(dev, host, mask, 0), *r = pick(dev, host, mask, 1);
            for (int i = 0; i < N; i++) s[i] = hs[i] = val(rank, round, i), r[i] = ref[i] = -7;
            MPI_Request q = MPI_REQUEST_NULL;
            MPI_Status st;
            /* (a receive with room for one more element: the last one stays as it was) */
            int rc = MPI_Isendrecv(s, N - 1, MPI_INT, to, 5, r, N, MPI_INT, from, 5, c, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
            PMPI_Sendrecv(hs, N - 1, MPI_INT, to, 6, ref, N, MPI_INT, from, 6, c, MPI_STATUS_IGNORE);
            int cnt = -1;
            MPI_Get_count(&st, MPI_INT, &cnt);
            if (rc != MPI_SUCCESS || memcmp(r, ref, N * sizeof(int)) || st.MPI_SOURCE != from || st.MPI_TAG != 5 ||
                cnt != N - 1)
                FAIL("MPI_Isendrecv (buffers %s/%s, %s): rc %d, source %d, tag %d, count %d, element 0 %d (PMPI %d)",
                     mask & 1 ? "device" : "host", mask & 2 ? "device" : "host", self ? "itself" : "ring", rc,
                     st.MPI_SOURCE, st.MPI_TAG, cnt, r[0], ref[0]);
            int *b = pick(dev, host, mask, 2);
            for (int i = 0; i < N; i++) b[i] = ref[i] = val(rank, round + 50, i);
            rc = MPI_Isendrecv_replace(b, N, MPI_INT, to, 7, from, 7, c, &q);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
            PMPI_Sendrecv_replace(ref, N, MPI_INT, to, 8, from, 8, c, MPI_STATUS_IGNORE);
            MPI_Get_count(&st, MPI_INT, &cnt);
            if (rc != MPI_SUCCESS || memcmp(b, ref, N * sizeof(int)) || st.MPI_SOURCE != from || st.MPI_TAG != 7 ||
                cnt != N)
                FAIL("MPI_Isendrecv_replace (buffer %s, %s): rc %d, source %d, tag %d, count %d, element 0 %d (PMPI %d)",
                     mask & 4 ? "device" : "host", self ? "itself" : "ring", rc, st.MPI_SOURCE, st.MPI_TAG, cnt, b[0],
                     ref[0]);
        }
}

/* a call on device buffers that must fail with MPI_ERR_UNSUPPORTED_OPERATION, naming it, leave
 * the request null and the output untouched */
static void expect_unsupported(const char *fn, int rc, MPI_Request q, const int *out)
{
    int cls = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING] = "";
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    char call[64];
    snprintf(call, sizeof(call), "MPI_%s", fn);
    if (cls != MPI_ERR_UNSUPPORTED_OPERATION || !strstr(msg, call))
        FAIL("%s on device buffers: class %d (want MPI_ERR_UNSUPPORTED_OPERATION %d), message '%s'", call, cls,
             MPI_ERR_UNSUPPORTED_OPERATION, msg);
    if (q != MPI_REQUEST_NULL) FAIL("%s on device buffers: the request is not MPI_REQUEST_NULL", call);
    for (int i = 0; i < N; i++)
        if (out[i] != -3) {
            FAIL("%s on device buffers: the output was written (element %d is %d)", call, i, out[i]);
            break;
        }
}

static void t_unsupported(MPI_Comm c, MPI_Comm ring, int **dev)
{
    int *s = dev[0], *r = dev[1];
    int cnts[64], dsp[64];
    MPI_Aint adsp[64];
    MPI_Datatype ty[64];
    for (int i = 0; i < 64; i++) cnts[i] = 1, dsp[i] = i, adsp[i] = i * (MPI_Aint)sizeof(int), ty[i] = MPI_INT;
    for (int i = 0; i < N; i++) s[i] = val(rank, 0, i), r[i] = -3;
    const MPI_Info I = MPI_INFO_NULL;
    const MPI_Datatype T = MPI_INT;
    MPI_Request q;
    int rc;
    /* (the request poisoned first: a refused call must set it to MPI_REQUEST_NULL) */
#define UNSUP(fn, ...)                                          \
    do {                                                        \
        memset(&q, 0xA5, sizeof(q));                            \
        rc = MPI_##fn(__VA_ARGS__, I, &q);                      \
        expect_unsupported(#fn, rc, q, r);                      \
    } while (0)
    UNSUP(Allreduce_init, s, r, 4, T, MPI_SUM, c);
    UNSUP(Reduce_init, s, r, 4, T, MPI_SUM, 0, c);
    UNSUP(Bcast_init, r, 4, T, 0, c);
    UNSUP(Allgather_init, s, 1, T, r, 1, T, c);
    UNSUP(Allgatherv_init, s, 1, T, r, cnts, dsp, T, c);
    UNSUP(Alltoall_init, s, 1, T, r, 1, T, c);
    UNSUP(Alltoallv_init, s, cnts, dsp, T, r, cnts, dsp, T, c);
    UNSUP(Alltoallw_init, s, cnts, dsp, ty, r, cnts, dsp, ty, c);
    UNSUP(Reduce_scatter_init, s, r, cnts, T, MPI_SUM, c);
    UNSUP(Reduce_scatter_block_init, s, r, 1, T, MPI_SUM, c);
    UNSUP(Gather_init, s, 1, T, r, 1, T, 0, c);
    UNSUP(Gatherv_init, s, 1, T, r, cnts, dsp, T, 0, c);
    UNSUP(Scatter_init, s, 1, T, r, 1, T, 0, c);
    UNSUP(Scatterv_init, s, cnts, dsp, T, r, 1, T, 0, c);
    UNSUP(Scan_init, s, r, 4, T, MPI_SUM, c);
    UNSUP(Exscan_init, s, r, 4, T, MPI_SUM, c);
    UNSUP(Neighbor_allgather_init, s, 1, T, r, 1, T, ring);
    UNSUP(Neighbor_allgatherv_init, s, 1, T, r, cnts, dsp, T, ring);
    UNSUP(Neighbor_alltoall_init, s, 1, T, r, 1, T, ring);
    UNSUP(Neighbor_alltoallv_init, s, cnts, dsp, T, r, cnts, dsp, T, ring);
    UNSUP(Neighbor_alltoallw_init, s, cnts, adsp, ty, r, cnts, adsp, ty, ring);
    UNSUP(Psend_init, s, 2, (MPI_Count)2, T, (rank + 1) % size, 3, c);
    UNSUP(Precv_init, r, 2, (MPI_Count)2, T, (rank + size - 1) % size, 3, c);
#undef UNSUP
    if (route_calls("Allreduce_init", NCCLMPI_ROUTE_ERROR) != 1 || route_calls("Psend_init", NCCLMPI_ROUTE_ERROR) != 1)
        FAIL("the refused calls are not counted on the error route (%llu, %llu)",
             route_calls("Allreduce_init", NCCLMPI_ROUTE_ERROR), route_calls("Psend_init", NCCLMPI_ROUTE_ERROR));
}

/* the same process, host buffers: a persistent collective works (three starts) */
static void t_host_persistent(MPI_Comm c)
{
    static int s[N], r[N], ref[N];
    MPI_Request q = MPI_REQUEST_NULL;
    if (MPI_Allreduce_init(s, r, N, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &q) != MPI_SUCCESS) {
        FAIL("MPI_Allreduce_init on host buffers failed");
        return;
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) s[i] = val(rank, round, i), r[i] = -1;
        if (MPI_Start(&q) != MPI_SUCCESS || MPI_Wait(&q, MPI_STATUS_IGNORE) != MPI_SUCCESS) FAIL("start/wait failed");
        PMPI_Allreduce(s, ref, N, MPI_INT, MPI_SUM, c);
        if (memcmp(r, ref, sizeof(r))) FAIL("MPI_Allreduce_init on host buffers, round %d: %d, PMPI %d", round, r[0], ref[0]);
    }
    MPI_Request_free(&q);
}

int main(int argc, char **argv)
{
    stand_in_mpi_init(&argc, &argv, "MPI4_DEVICE_THREADS", &rank, &size);
    CUdeviceptr b[NBUF];
    if (!stand_in_driver("mpi4_device_prog", NBUF, N * sizeof(int), b)) {
        MPI_Finalize();
        return 77;
    }
    static int hb[3][N];
    int *dev[3] = {(int *)(uintptr_t)b[0], (int *)(uintptr_t)b[1], (int *)(uintptr_t)b[2]};
    int *host[3] = {hb[0], hb[1], hb[2]};
    MPI_Comm c, ring;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(c, 1, dims, periods, 0, &ring);
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    const unsigned long long staged0 = route_calls("Isendrecv", NCCLMPI_ROUTE_STAGED);
    t_isendrecv(c, dev, host);
    if (route_calls("Isendrecv", NCCLMPI_ROUTE_STAGED) == staged0) FAIL("no MPI_Isendrecv on device buffers was staged");
    t_unsupported(c, ring, dev);
    t_host_persistent(c);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total ? "mpi4_device_prog: %d failure(s)\n" : "mpi4_device_prog: ok\n", total);
    MPI_Comm_free(&ring);
    MPI_Comm_free(&c);
    MPI_Finalize();
    return total ? 1 : 0;
}
