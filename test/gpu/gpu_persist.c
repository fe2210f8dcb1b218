/* gpu_persist: persistent point-to-point requests on device buffers (MPI_Send_init,
 * MPI_Ssend_init, MPI_Recv_init), restarted many times around a ring. Before each start the send
 * buffer is rewritten on the legacy default stream without synchronisation (the start must see
 * it); even ranks send from device memory, odd ranks from host memory, receives go to device
 * memory larger than the message (its tail must stay as it was; the status counts the message).
 * Completion alternates between MPI_Waitall with and without statuses, MPI_Testall loops,
 * MPI_Waitany and MPI_Request_get_status (the data must be there when it reports completion).
 * Then: a cancelled persistent receive leaves its buffer alone; a receive freed while active
 * still delivers its message (at a later call). --host: the same on malloc buffers (label mpi).
 *
 *   gpu_persist [--host] [--iters N]
 */
#include "gpu_common.h"

static int rank, size, failures, host_mode;
enum { N = 4099, GUARD = 8, TAG = 5, TAG_FREE = 6, TAG_NEVER = 7 };

static void fill(int kind, void *p, int byte, size_t n)
{
    if (kind == MK_MALLOC) memset(p, byte, n);
    else CUDACHECK(cudaMemsetAsync(p, byte, n, cudaStreamLegacy)); /* no sync: the start must see it */
}

/* the receive buffer holds `byte` in the message and POISON in the guard after it */
static int check_recv(int kind, const void *dr, int byte, const char *what, int it)
{
    static unsigned char h[(N + GUARD) * sizeof(int)];
    get_bytes_unordered(kind, h, dr, sizeof(h));
    for (size_t i = 0; i < sizeof(h); i++) {
        const int want = i < N * sizeof(int) ? byte : 0x5A;
        if (h[i] != (unsigned char)want) {
            fprintf(stderr, "[rank %d] FAIL %s, iteration %d: byte %zu = %d, want %d\n", rank, what, it, i, h[i], want);
            failures++;
            return 0;
        }
    }
    return 1;
}

static int byte_of(int r, int it) { return (it * 7 + r * 13 + 1) & 0xff; }

int main(int argc, char **argv)
{
    int iters = 1000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host")) host_mode = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!host_mode) gpu_select(NULL);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const int skind = host_mode || (rank & 1) ? MK_MALLOC : MK_DEV, rkind = host_mode ? MK_MALLOC : MK_DEV;
    const size_t rbytes = (N + GUARD) * sizeof(int);
    void *ds = mk_alloc(skind, N * sizeof(int)), *dr = mk_alloc(rkind, rbytes);
    unsigned char *poison = malloc(rbytes);
    memset(poison, 0x5A, rbytes);
    put_bytes(rkind, dr, poison, rbytes);

    MPI_Request rq[2];
    int rc = MPI_Recv_init(dr, N + GUARD, MPI_INT, prev, TAG, c, &rq[0]);
    GPU_CHECK(rc == MPI_SUCCESS, "MPI_Recv_init on %s: rc %d", mk_name[rkind], rc);
    rc = MPI_Send_init(ds, N, MPI_INT, next, TAG, c, &rq[1]);
    GPU_CHECK(rc == MPI_SUCCESS, "MPI_Send_init on %s: rc %d", mk_name[skind], rc);
    for (int it = 0; it < iters && !failures; it++) {
        put_bytes(rkind, dr, poison, rbytes);
        fill(skind, ds, byte_of(rank, it), N * sizeof(int));
        MPI_Status st[2];
        int flag = 0, idx = -1;
        switch (it % 5) {
        case 0:
            rc = MPI_Startall(2, rq);
            if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
            break;
        case 1:
            rc = MPI_Start(&rq[0]);
            if (rc == MPI_SUCCESS) rc = MPI_Start(&rq[1]);
            if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, rq, st);
            if (rc == MPI_SUCCESS) {
                int cnt = -1;
                MPI_Get_count(&st[0], MPI_INT, &cnt);
                GPU_CHECK(cnt == N && st[0].MPI_SOURCE == prev && st[0].MPI_TAG == TAG, "status: count %d source %d tag %d",
                          cnt, st[0].MPI_SOURCE, st[0].MPI_TAG);
            }
            break;
        case 2:
            rc = MPI_Startall(2, rq);
            while (rc == MPI_SUCCESS && !flag) rc = MPI_Testall(2, rq, &flag, st);
            break;
        case 3:
            rc = MPI_Startall(2, rq);
            for (int k = 0; k < 2 && rc == MPI_SUCCESS; k++) rc = MPI_Waitany(2, rq, &idx, MPI_STATUS_IGNORE);
            break;
        case 4:
            rc = MPI_Startall(2, rq);
            while (rc == MPI_SUCCESS && !flag) rc = MPI_Request_get_status(rq[0], &flag, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS) check_recv(rkind, dr, byte_of(prev, it), "after MPI_Request_get_status", it);
            if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
            break;
        }
        GPU_CHECK(rc == MPI_SUCCESS, "iteration %d (form %d): rc %d", it, it % 5, rc);
        check_recv(rkind, dr, byte_of(prev, it), "persistent receive", it);
    }
    for (int k = 0; k < 2; k++) {
        rc = MPI_Request_free(&rq[k]);
        GPU_CHECK(rc == MPI_SUCCESS && rq[k] == MPI_REQUEST_NULL, "MPI_Request_free: rc %d", rc);
    }

    /* a synchronous persistent send to ourselves, and a cancelled receive */
    MPI_Request ss, sr, cr;
    put_bytes(rkind, dr, poison, rbytes);
    fill(skind, ds, 0x33, N * sizeof(int));
    MPI_Ssend_init(ds, N, MPI_INT, rank, TAG, c, &ss);
    MPI_Recv_init(dr, N + GUARD, MPI_INT, rank, TAG, c, &sr);
    MPI_Start(&sr);
    MPI_Start(&ss);
    MPI_Request both[2] = {sr, ss};
    rc = MPI_Waitall(2, both, MPI_STATUSES_IGNORE);
    GPU_CHECK(rc == MPI_SUCCESS, "self Ssend_init/Recv_init: rc %d", rc);
    check_recv(rkind, dr, 0x33, "self-send", 0);
    MPI_Request_free(&ss);
    MPI_Request_free(&sr);
    put_bytes(rkind, dr, poison, rbytes);
    MPI_Recv_init(dr, N, MPI_INT, prev, TAG_NEVER, c, &cr);
    MPI_Start(&cr);
    MPI_Cancel(&cr);
    MPI_Status cst;
    rc = MPI_Wait(&cr, &cst);
    int cancelled = 0;
    MPI_Test_cancelled(&cst, &cancelled);
    GPU_CHECK(rc == MPI_SUCCESS && cancelled, "cancelled persistent receive: rc %d cancelled %d", rc, cancelled);
    unsigned char *h = malloc(rbytes);
    get_bytes(rkind, h, dr, rbytes);
    GPU_CHECK(!memcmp(h, poison, rbytes), "a cancelled receive wrote its buffer");
    MPI_Request_free(&cr);

    /* freed while active: the message still lands (driven by later calls into the library) */
    MPI_Request fr;
    MPI_Recv_init(dr, N + GUARD, MPI_INT, prev, TAG_FREE, c, &fr);
    MPI_Start(&fr);
    rc = MPI_Request_free(&fr);
    GPU_CHECK(rc == MPI_SUCCESS && fr == MPI_REQUEST_NULL, "MPI_Request_free of an active receive: rc %d", rc);
    fill(skind, ds, 0x44, N * sizeof(int));
    if (skind != MK_MALLOC) CUDACHECK(cudaDeviceSynchronize());
    MPI_Send(ds, N, MPI_INT, next, TAG_FREE, c);
    MPI_Barrier(c);
    double t0 = MPI_Wtime();
    int landed = 0;
    while (!landed && MPI_Wtime() - t0 < 5.0) {
        MPI_Request dummy;
        int flag;
        MPI_Irecv(NULL, 0, MPI_INT, MPI_PROC_NULL, 0, c, &dummy);
        MPI_Test(&dummy, &flag, MPI_STATUS_IGNORE);
        get_bytes(rkind, h, dr, N * sizeof(int));
        landed = h[0] == 0x44 && h[N * sizeof(int) - 1] == 0x44;
    }
    GPU_CHECK(landed, "a receive freed while active did not deliver its message within 5 s");
    free(h);

    nm_stats_view_t s = gpu_stats("Recv_init");
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("gpu_persist: %d ranks%s, %d restarts: %d failure(s); MPI_Recv_init staged %llu\n", size,
               host_mode ? " (--host)" : "", iters, total, s.calls == (unsigned long long)-1 ? 0ULL : s.route[NCCLMPI_ROUTE_STAGED]);
    mk_free(skind, ds);
    mk_free(rkind, dr);
    free(poison);
    MPI_Comm_free(&c);
    MPI_Finalize();
    return total ? 1 : 0;
}
