/* p2p_bench: point-to-point exchanges of device buffers, seven ways in one job:
 *   mpi       MPI_Isend/Irecv/Waitall (MPI_Send/Recv one way) on device buffers (intercepted by
 *             libncclmpi when preloaded)
 *   persist   the same messages as persistent requests (MPI_Send_init/Recv_init, made once per
 *             pattern and size): MPI_Startall + MPI_Waitall
 *   neighbor  ring and halo3d only: the same messages as one MPI_Neighbor_alltoallv on a periodic
 *             Cartesian communicator of the pattern's shape
 *   nccl      raw ncclSend/ncclRecv of the same messages in one NCCL group + stream sync
 *   staged    cudaMemcpy to host, the real MPI (PMPI_*, never intercepted), copy back
 *   ipc       what a pull over CUDA IPC costs: a 64-byte envelope through the real MPI, then the
 *             receiver copies from the sender's buffer (mapped once with cudaIpcOpenMemHandle)
 *   ipc+copy  the same, the sender first copying its message into a buffer of its own (so its
 *             send could complete without waiting for the receiver)
 * Patterns: exchange (rank pairs 0-1, 2-3, ... both ways), oneway (even to odd rank), ring (each
 * rank to both neighbours and from both), halo3d (a periodic 3-D grid from MPI_Dims_create: each
 * rank to its 6 face neighbours and from them; in a dimension of 1 or 2 ranks a neighbour is the
 * rank itself or appears twice). Every iteration is blocking (the data is in the receive
 * buffers when it returns) after a barrier; medians over ranks-max. Prints latency, the ratios to
 * raw NCCL, the part of the mpi way's time spent in its Irecv/Isend calls before the Waitall
 * (mpi_post; 0 one way), and writes CSV.
 *
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so p2p_bench [-b 8] [-e 64M] [-f 4] [-p exchange,oneway,ring,halo3d]
 *          [-o out.csv]
 * The nccl and ipc columns need one GPU per rank (ranks on one node for ipc); they are left out otherwise.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { EXCH, ONEWAY, RING, HALO, NPAT };
static const char *const pat_names[NPAT] = {"exchange", "oneway", "ring", "halo3d"};
enum { MAXP = 6 }; /* neighbours of a pattern at most */
enum { W_MPI, W_NCCL, W_STAGED, W_IPC, W_IPCC, W_PERS, W_NEIGH, NWAY };
static const char *const way_names[NWAY] = {"mpi", "nccl", "staged", "ipc", "ipc+copy", "persist", "neighbor"};

static int rank, size, ipc_ok, nccl_ok;
static ncclComm_t nc;
static cudaStream_t stream;
static char *dsend, *drecv, *dstage, *hsend, *hrecv;
static char **peer_send, **peer_stage; /* by rank: its buffers, mapped (ipc; our own for us) */
static size_t maxb;
static int nslots = 2, dims[3]; /* message slots per buffer (MAXP with halo3d); the 3-D grid */
static MPI_Comm cart_ring = MPI_COMM_NULL, cart_halo = MPI_COMM_NULL; /* W_NEIGH's communicators */

/* the peers of a pattern: np of them; peer k's message goes at offset k * maxb */
static int peers(int pat, int *p, int *sends, int *recvs)
{
    *sends = *recvs = 1;
    if (pat == HALO) { /* dimension d: slot 2d toward -1, 2d + 1 toward +1 (row-major coordinates) */
        int c[3], r = rank, stride[3] = {dims[1] * dims[2], dims[2], 1};
        for (int d = 0; d < 3; d++) {
            c[d] = r / stride[d];
            r %= stride[d];
        }
        for (int d = 0; d < 3; d++)
            for (int dir = 0; dir < 2; dir++) {
                const int nd = (c[d] + (dir ? 1 : dims[d] - 1)) % dims[d];
                p[2 * d + dir] = rank + (nd - c[d]) * stride[d];
            }
        return 6;
    }
    if (pat == RING) {
        p[0] = (rank + 1) % size;
        p[1] = (rank + size - 1) % size;
        return 2;
    }
    int partner = rank ^ 1;
    if (partner >= size) return 0;
    p[0] = partner;
    if (pat == ONEWAY) {
        *sends = !(rank & 1);
        *recvs = rank & 1;
    }
    return 1;
}

/* the tags: a neighbour may appear twice (a ring of two ranks, a grid dimension of two), so the
 * messages are told apart by tag: what goes toward neighbour k (slot k) arrives from the opposite
 * direction there, so it goes out with tag k ^ 1 into the peer's slot k ^ 1 */
static int stag(int pat, int k) { return pat == RING || pat == HALO ? k ^ 1 : 0; }
static int rtag(int pat, int k) { return pat == RING || pat == HALO ? k : 0; }

static double posted_at; /* W_MPI: when the last Isend returned (the Waitall starts) */

/* W_PERS: the persistent requests of one pattern and size (made at its first run) */
static struct {
    int pat, nq;
    size_t n;
    MPI_Request q[2 * MAXP];
} pers = {-1, 0, 0, {0}};

static int pers_requests(int pat, size_t n, const int *p, int np, int s, int r)
{
    if (pers.pat == pat && pers.n == n) return pers.nq;
    for (int i = 0; i < pers.nq; i++) MPI_Request_free(&pers.q[i]);
    pers.pat = pat;
    pers.n = n;
    pers.nq = 0;
    for (int k = 0; k < np; k++) {
        if (r) MPI_Recv_init(drecv + k * maxb, (int)n, MPI_BYTE, p[k], rtag(pat, k), MPI_COMM_WORLD, &pers.q[pers.nq++]);
        if (s) MPI_Send_init(dsend + k * maxb, (int)n, MPI_BYTE, p[k], stag(pat, k), MPI_COMM_WORLD, &pers.q[pers.nq++]);
    }
    return pers.nq;
}

static void run(int way, int pat, size_t n)
{
    int p[MAXP], s, r, np = peers(pat, p, &s, &r);
    MPI_Request q[2 * MAXP];
    int nq = 0;
    char env[MAXP][64], renv[MAXP][64];
    switch (way) {
    case W_MPI:
        if (pat == ONEWAY && np) {
            if (s) MPI_Send(dsend, (int)n, MPI_BYTE, p[0], 0, MPI_COMM_WORLD);
            else MPI_Recv(drecv, (int)n, MPI_BYTE, p[0], 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            return;
        }
        for (int k = 0; k < np; k++) {
            MPI_Irecv(drecv + k * maxb, (int)n, MPI_BYTE, p[k], rtag(pat, k), MPI_COMM_WORLD, &q[nq++]);
            MPI_Isend(dsend + k * maxb, (int)n, MPI_BYTE, p[k], stag(pat, k), MPI_COMM_WORLD, &q[nq++]);
        }
        posted_at = bench_now();
        MPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        return;
    case W_NEIGH: {
        /* the Cartesian order is -1 then +1 per dimension: halo3d's slots; the ring's slots are
         * +1 then -1 (what goes toward -1 arrives in the other's +1 block, as with the tags) */
        int cnt[MAXP], disp[MAXP];
        for (int k = 0; k < np; k++) {
            cnt[k] = (int)n;
            disp[k] = (int)((pat == RING ? 1 - k : k) * maxb);
        }
        MPI_Neighbor_alltoallv(dsend, cnt, disp, MPI_BYTE, drecv, cnt, disp, MPI_BYTE, pat == RING ? cart_ring : cart_halo);
        return;
    }
    case W_PERS:
        nq = pers_requests(pat, n, p, np, s, r);
        MPI_Startall(nq, pers.q);
        MPI_Waitall(nq, pers.q, MPI_STATUSES_IGNORE);
        return;
    case W_NCCL:
        /* NCCL pairs the messages between two ranks in issue order: slot stag(k) goes out k-th,
         * so that the peer's receive k gets slot k ^ 1, as with the tags */
        NCCLCHECK(ncclGroupStart());
        for (int k = 0; k < np; k++) {
            const int j = stag(pat, k);
            if (s) NCCLCHECK(ncclSend(dsend + j * maxb, n, ncclInt8, p[j], nc, stream));
            if (r) NCCLCHECK(ncclRecv(drecv + k * maxb, n, ncclInt8, p[k], nc, stream));
        }
        NCCLCHECK(ncclGroupEnd());
        CUDACHECK(cudaStreamSynchronize(stream));
        return;
    case W_STAGED:
        for (int k = 0; k < np && s; k++) CUDACHECK(cudaMemcpy(hsend + k * maxb, dsend + k * maxb, n, cudaMemcpyDeviceToHost));
        for (int k = 0; k < np; k++) {
            if (r) PMPI_Irecv(hrecv + k * maxb, (int)n, MPI_BYTE, p[k], rtag(pat, k), MPI_COMM_WORLD, &q[nq++]);
            if (s) PMPI_Isend(hsend + k * maxb, (int)n, MPI_BYTE, p[k], stag(pat, k), MPI_COMM_WORLD, &q[nq++]);
        }
        PMPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        for (int k = 0; k < np && r; k++) CUDACHECK(cudaMemcpy(drecv + k * maxb, hrecv + k * maxb, n, cudaMemcpyHostToDevice));
        return;
    case W_IPC:
    case W_IPCC:
        /* the sender (copies into its own buffer and) announces; the receiver pulls */
        if (s && way == W_IPCC) {
            for (int k = 0; k < np; k++) CUDACHECK(cudaMemcpyAsync(dstage + k * maxb, dsend + k * maxb, n, cudaMemcpyDeviceToDevice, stream));
            CUDACHECK(cudaStreamSynchronize(stream));
        }
        for (int k = 0; k < np; k++) {
            memset(env[k], 0, 64);
            memcpy(env[k], &n, sizeof(n));
            if (r) PMPI_Irecv(renv[k], 64, MPI_BYTE, p[k], rtag(pat, k), MPI_COMM_WORLD, &q[nq++]);
            if (s) PMPI_Isend(env[k], 64, MPI_BYTE, p[k], stag(pat, k), MPI_COMM_WORLD, &q[nq++]);
        }
        PMPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        if (r) {
            /* neighbour k sent our message from its slot stag(k) */
            for (int k = 0; k < np; k++) {
                const int slot = stag(pat, k);
                const char *src = (way == W_IPCC ? peer_stage[p[k]] : peer_send[p[k]]) + slot * maxb;
                CUDACHECK(cudaMemcpyAsync(drecv + k * maxb, src, n, cudaMemcpyDeviceToDevice, stream));
            }
            CUDACHECK(cudaStreamSynchronize(stream));
        }
        return;
    }
}

/* medians over ranks-max of an iteration; *post (W_MPI with Isend/Irecv, else 0): of the time
 * spent issuing the Irecv/Isend calls, before the Waitall */
static double time_it(int way, int pat, size_t n, int iters, double *post)
{
    double *t = malloc(iters * sizeof(double)), *tp = malloc(iters * sizeof(double));
    for (int i = 0; i < 3; i++) run(way, pat, n);
    for (int i = 0; i < iters; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        posted_at = 0;
        double t0 = bench_now();
        run(way, pat, n);
        t[i] = bench_now() - t0;
        tp[i] = posted_at > 0 ? posted_at - t0 : 0;
    }
    qsort(t, iters, sizeof(double), bench_cmp_double);
    qsort(tp, iters, sizeof(double), bench_cmp_double);
    double med[2] = {t[iters / 2], tp[iters / 2]}, mx[2];
    free(t);
    free(tp);
    PMPI_Allreduce(med, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (post) *post = mx[1] * 1e6;
    return mx[0] * 1e6;
}

/* the data arrived: every receive buffer holds its sender's pattern (checked once per size and
 * way, after a poisoned receive buffer) */
static int check(int way, int pat, size_t n)
{
    int p[MAXP], s, r, np = peers(pat, p, &s, &r), bad = 0;
    CUDACHECK(cudaMemset(drecv, 0xEE, nslots * maxb));
    CUDACHECK(cudaDeviceSynchronize());
    PMPI_Barrier(MPI_COMM_WORLD);
    run(way, pat, n);
    if (r && n)
        for (int k = 0; k < np; k++) {
            unsigned char a, z;
            const int slot = stag(pat, k);
            CUDACHECK(cudaMemcpy(&a, drecv + k * maxb, 1, cudaMemcpyDeviceToHost));
            CUDACHECK(cudaMemcpy(&z, drecv + k * maxb + n - 1, 1, cudaMemcpyDeviceToHost));
            if (a != (unsigned char)(p[k] * 16 + slot) || z != (unsigned char)(p[k] * 16 + slot + n - 1)) bad = 1;
        }
    int any = 0;
    PMPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

int main(int argc, char **argv)
{
    size_t b = 8, e = 64u << 20;
    int f = 4;
    const char *pats = "exchange,oneway,ring,halo3d", *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!bench_sweep_opt(argv[i], argv[i + 1], &b, &e, &f, &out) && !strcmp(argv[i], "-p")) pats = argv[i + 1];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndev = 0;
    gpu_select(&ndev);
    CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    maxb = e;
    if (strstr(pats, "halo3d")) nslots = MAXP;
    MPI_Dims_create(size, 3, dims);
    {
        int per[3] = {1, 1, 1};
        MPI_Cart_create(MPI_COMM_WORLD, 1, &size, per, 0, &cart_ring);
        MPI_Cart_create(MPI_COMM_WORLD, 3, dims, per, 0, &cart_halo);
    }
    CUDACHECK(cudaMalloc((void **)&dsend, nslots * maxb));
    CUDACHECK(cudaMalloc((void **)&drecv, nslots * maxb));
    CUDACHECK(cudaMalloc((void **)&dstage, nslots * maxb));
    CUDACHECK(cudaMallocHost((void **)&hsend, nslots * maxb));
    CUDACHECK(cudaMallocHost((void **)&hrecv, nslots * maxb));
    /* slot k of rank r: its first byte r * 16 + k, its bytes counting up from there */
    for (int k = 0; k < nslots; k++)
        for (size_t i = 0; i < maxb; i++) hsend[k * maxb + i] = (char)(rank * 16 + k + i);
    CUDACHECK(cudaMemcpy(dsend, hsend, nslots * maxb, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemcpy(dstage, hsend, nslots * maxb, cudaMemcpyHostToDevice));
    /* NCCL refuses ranks that share a GPU: then the nccl column is left out (every rank sees
     * the same device count on one node; the minimum decides) */
    int own_gpu = ndev >= size || size == 1;
    PMPI_Allreduce(&own_gpu, &nccl_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (nccl_ok) {
        ncclUniqueId id;
        if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
        PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCLCHECK(ncclCommInitRank(&nc, size, id, rank));
    }

    /* CUDA IPC: every rank's send and staging buffers, mapped by its ring neighbours and partner
     * (on one node, on another GPU; else the ipc columns are left out) */
    cudaIpcMemHandle_t mine[2], *all = malloc(2 * size * sizeof(cudaIpcMemHandle_t));
    char host[MPI_MAX_PROCESSOR_NAME], *hosts = malloc((size_t)size * MPI_MAX_PROCESSOR_NAME);
    int hl;
    memset(host, 0, sizeof(host));
    PMPI_Get_processor_name(host, &hl);
    PMPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    int ok = ndev >= size || size == 1;
    for (int r = 0; r < size; r++) ok &= !strcmp(hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME, host);
    ok = ok && cudaIpcGetMemHandle(&mine[0], dsend) == cudaSuccess && cudaIpcGetMemHandle(&mine[1], dstage) == cudaSuccess;
    PMPI_Allgather(mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
    /* map every neighbour of every pattern once (our own buffers for ourselves) */
    peer_send = calloc(size, sizeof(char *));
    peer_stage = calloc(size, sizeof(char *));
    peer_send[rank] = dsend;
    peer_stage[rank] = dstage;
    for (int pat = 0; pat < NPAT && ok; pat++) {
        int pr[MAXP], s_, r_, npr = peers(pat, pr, &s_, &r_);
        for (int k = 0; k < npr && ok; k++) {
            const int q = pr[k];
            if (peer_send[q]) continue;
            ok &= cudaIpcOpenMemHandle((void **)&peer_send[q], all[2 * q], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
            ok &= cudaIpcOpenMemHandle((void **)&peer_stage[q], all[2 * q + 1], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
        }
    }
    PMPI_Allreduce(&ok, &ipc_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    (void)cudaGetLastError();

    FILE *csv = out && rank == 0 ? fopen(out, "w") : NULL;
    if (csv) fprintf(csv, "pattern,ranks,bytes,mpi_us,nccl_us,staged_us,ipc_us,ipc_copy_us,mpi_post_us,persist_us,neighbor_us\n");
    if (rank == 0) {
        struct cudaDeviceProp prop;
        CUDACHECK(cudaGetDeviceProperties(&prop, 0));
        int v;
        ncclGetVersion(&v);
        printf("# p2p_bench: %d ranks, %d GPU(s) per node (%s), NCCL %d, medians of blocking iterations; "
               "bytes per message%s%s\n", size, ndev, prop.name, v, ipc_ok ? "" : "; ipc columns not run (needs one GPU per rank on one node)",
               nccl_ok ? "" : "; nccl column not run (ranks share a GPU)");
        printf("%-9s %10s %10s %10s %10s %10s %10s %9s %9s %10s %10s %10s\n", "pattern", "bytes", "mpi_us", "nccl_us", "staged_us",
               "ipc_us", "ipc+cp_us", "mpi/nccl", "ipc/nccl", "mpi_post", "persist_us", "neigh_us");
    }
    int failed = 0;
    for (int pat = 0; pat < NPAT; pat++) {
        if (!strstr(pats, pat_names[pat])) continue;
        for (size_t n = b; n <= e; n *= f) {
            int iters = n >= (16u << 20) ? 20 : n >= (1u << 20) ? 50 : 200;
            double t[NWAY], post = 0;
            for (int w = 0; w < NWAY; w++) {
                t[w] = -1;
                if (((w == W_IPC || w == W_IPCC) && !ipc_ok) || (w == W_NCCL && !nccl_ok)) continue;
                if (w == W_NEIGH && pat != RING && pat != HALO) continue;
                if (check(w, pat, n)) {
                    if (rank == 0) printf("%s %zu B: %s delivered wrong data\n", pat_names[pat], n, way_names[w]);
                    failed = 1;
                    continue;
                }
                t[w] = time_it(w, pat, n, iters, w == W_MPI ? &post : NULL);
            }
            if (rank == 0) {
                const double none = -1;  /* (a ratio to a column that was not run) */
                printf("%-9s %10zu %10.2f %10.2f %10.2f %10.2f %10.2f %9.2f %9.2f %10.2f %10.2f %10.2f\n", pat_names[pat], n, t[0], t[1],
                       t[2], t[3], t[4], t[1] > 0 ? t[0] / t[1] : none, t[1] > 0 && t[3] > 0 ? t[3] / t[1] : none, post, t[W_PERS],
                       t[W_NEIGH]);
                fflush(stdout);
            }
            if (csv)
                fprintf(csv, "%s,%d,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", pat_names[pat], size, n, t[0], t[1], t[2], t[3], t[4],
                        post, t[W_PERS], t[W_NEIGH]);
        }
    }
    if (csv) fclose(csv);
    for (int i = 0; i < pers.nq; i++) MPI_Request_free(&pers.q[i]);
    for (int q = 0; q < size; q++)
        if (q != rank && peer_send[q]) {
            cudaIpcCloseMemHandle(peer_send[q]);
            if (peer_stage[q]) cudaIpcCloseMemHandle(peer_stage[q]);
        }
    if (nccl_ok) ncclCommDestroy(nc);
    MPI_Comm_free(&cart_ring);
    MPI_Comm_free(&cart_halo);
    MPI_Finalize();
    return failed;
}
