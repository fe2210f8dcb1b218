/* p2p_bench: point-to-point exchanges of device buffers, five ways in one job:
 *   mpi       MPI_Isend/Irecv/Waitall (MPI_Send/Recv one way) on device buffers (intercepted by
 *             libncclmpi when preloaded)
 *   nccl      raw ncclSend/ncclRecv of the same messages in one NCCL group + stream sync
 *   staged    cudaMemcpy to host, the real MPI (PMPI_*, never intercepted), copy back
 *   ipc       what a pull over CUDA IPC costs: a 64-byte envelope through the real MPI, then the
 *             receiver copies from the sender's buffer (mapped once with cudaIpcOpenMemHandle)
 *   ipc+copy  the same, the sender first copying its message into a buffer of its own (so its
 *             send could complete without waiting for the receiver)
 * Patterns: exchange (rank pairs 0-1, 2-3, ... both ways), oneway (even to odd rank), ring (each
 * rank to both neighbours and from both). Every iteration is blocking (the data is in the receive
 * buffers when it returns) after a barrier; medians over ranks-max. Prints latency, the ratios to
 * raw NCCL, and writes CSV.
 *
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so p2p_bench [-b 8] [-e 64M] [-f 4] [-p exchange,oneway,ring]
 *          [-o out.csv]
 * Needs one GPU per rank (ranks on one node for the ipc columns: they are left out otherwise).
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { EXCH, ONEWAY, RING, NPAT };
static const char *const pat_names[NPAT] = {"exchange", "oneway", "ring"};
enum { W_MPI, W_NCCL, W_STAGED, W_IPC, W_IPCC, NWAY };
static const char *const way_names[NWAY] = {"mpi", "nccl", "staged", "ipc", "ipc+copy"};

static int rank, size, ipc_ok;
static ncclComm_t nc;
static cudaStream_t stream;
static char *dsend, *drecv, *dstage, *hsend, *hrecv;
static char *peer_send[2], *peer_stage[2]; /* the two peers' buffers, mapped (ipc) */
static size_t maxb;

/* the peers of a pattern: np of them; peer k's message goes at offset k * maxb */
static int peers(int pat, int *p, int *sends, int *recvs)
{
    *sends = *recvs = 1;
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

/* the tags: in a ring of two ranks both neighbours are the one peer, so the two messages to it
 * are told apart by tag (slot k goes out with tag 1 - k and arrives in the peer's slot 1 - k) */
static int stag(int pat, int k) { return pat == RING ? 1 - k : 0; }
static int rtag(int pat, int k) { return pat == RING ? k : 0; }

static void run(int way, int pat, size_t n)
{
    int p[2], s, r, np = peers(pat, p, &s, &r);
    MPI_Request q[8];
    int nq = 0;
    char env[2][64], renv[2][64];
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
        MPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        return;
    case W_NCCL:
        /* NCCL pairs the messages to one peer in issue order: the sends go out last slot first, so
         * that in a ring of two the peer's receive k gets slot 1 - k, as with the tags */
        NCCLCHECK(ncclGroupStart());
        for (int k = 0; k < np; k++) {
            if (s) NCCLCHECK(ncclSend(dsend + (np - 1 - k) * maxb, n, ncclInt8, p[np - 1 - k], nc, stream));
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
            /* peer k sent our message from its slot (1 - k) (its peer index of us) */
            for (int k = 0; k < np; k++) {
                const int slot = stag(pat, k);
                const char *src = (way == W_IPCC ? peer_stage[k] : peer_send[k]) + slot * maxb;
                CUDACHECK(cudaMemcpyAsync(drecv + k * maxb, src, n, cudaMemcpyDeviceToDevice, stream));
            }
            CUDACHECK(cudaStreamSynchronize(stream));
        }
        return;
    }
}

static double time_it(int way, int pat, size_t n, int iters)
{
    double *t = malloc(iters * sizeof(double));
    for (int i = 0; i < 3; i++) run(way, pat, n);
    for (int i = 0; i < iters; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        run(way, pat, n);
        t[i] = bench_now() - t0;
    }
    qsort(t, iters, sizeof(double), bench_cmp_double);
    double med = t[iters / 2], mx;
    free(t);
    PMPI_Allreduce(&med, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx * 1e6;
}

/* the data arrived: every receive buffer holds its sender's pattern (checked once per size and
 * way, after a poisoned receive buffer) */
static int check(int way, int pat, size_t n)
{
    int p[2], s, r, np = peers(pat, p, &s, &r), bad = 0;
    CUDACHECK(cudaMemset(drecv, 0xEE, 2 * maxb));
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
    const char *pats = "exchange,oneway,ring", *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) b = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) e = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) f = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) pats = argv[i + 1];
        else if (!strcmp(argv[i], "-o")) out = argv[i + 1];
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndev = 0;
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(rank % ndev));
    CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    maxb = e;
    CUDACHECK(cudaMalloc((void **)&dsend, 2 * maxb));
    CUDACHECK(cudaMalloc((void **)&drecv, 2 * maxb));
    CUDACHECK(cudaMalloc((void **)&dstage, 2 * maxb));
    CUDACHECK(cudaMallocHost((void **)&hsend, 2 * maxb));
    CUDACHECK(cudaMallocHost((void **)&hrecv, 2 * maxb));
    /* slot k of rank r: its first byte r * 16 + k, its bytes counting up from there */
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < maxb; i++) hsend[k * maxb + i] = (char)(rank * 16 + k + i);
    CUDACHECK(cudaMemcpy(dsend, hsend, 2 * maxb, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemcpy(dstage, hsend, 2 * maxb, cudaMemcpyHostToDevice));
    ncclUniqueId id;
    if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
    PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NCCLCHECK(ncclCommInitRank(&nc, size, id, rank));

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
    int pr[2], s_, r_, npr = peers(RING, pr, &s_, &r_);
    for (int k = 0; k < npr && ok && size > 1; k++) {
        ok &= cudaIpcOpenMemHandle((void **)&peer_send[k], all[2 * pr[k]], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
        ok &= cudaIpcOpenMemHandle((void **)&peer_stage[k], all[2 * pr[k] + 1], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
        if (size == 2) { /* both neighbours are the one peer: map it once */
            peer_send[1] = peer_send[0];
            peer_stage[1] = peer_stage[0];
            break;
        }
    }
    PMPI_Allreduce(&ok, &ipc_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    (void)cudaGetLastError();

    FILE *csv = out && rank == 0 ? fopen(out, "w") : NULL;
    if (csv) fprintf(csv, "pattern,ranks,bytes,mpi_us,nccl_us,staged_us,ipc_us,ipc_copy_us\n");
    if (rank == 0) {
        struct cudaDeviceProp prop;
        CUDACHECK(cudaGetDeviceProperties(&prop, 0));
        int v;
        ncclGetVersion(&v);
        printf("# p2p_bench: %d ranks, %d GPU(s) per node (%s), NCCL %d, medians of blocking iterations; "
               "bytes per message%s\n", size, ndev, prop.name, v, ipc_ok ? "" : "; ipc columns not run (needs one GPU per rank on one node)");
        printf("%-9s %10s %10s %10s %10s %10s %10s %9s %9s\n", "pattern", "bytes", "mpi_us", "nccl_us", "staged_us", "ipc_us",
               "ipc+cp_us", "mpi/nccl", "ipc/nccl");
    }
    int failed = 0;
    for (int pat = 0; pat < NPAT; pat++) {
        if (!strstr(pats, pat_names[pat])) continue;
        for (size_t n = b; n <= e; n *= f) {
            int iters = n >= (16u << 20) ? 20 : n >= (1u << 20) ? 50 : 200;
            double t[NWAY];
            for (int w = 0; w < NWAY; w++) {
                t[w] = -1;
                if (w >= W_IPC && !ipc_ok) continue;
                if (check(w, pat, n)) {
                    if (rank == 0) printf("%s %zu B: %s delivered wrong data\n", pat_names[pat], n, way_names[w]);
                    failed = 1;
                    continue;
                }
                t[w] = time_it(w, pat, n, iters);
            }
            if (rank == 0) {
                printf("%-9s %10zu %10.2f %10.2f %10.2f %10.2f %10.2f %9.2f %9.2f\n", pat_names[pat], n, t[0], t[1], t[2], t[3], t[4],
                       t[0] / t[1], t[3] / t[1]);
                fflush(stdout);
            }
            if (csv) fprintf(csv, "%s,%d,%zu,%.3f,%.3f,%.3f,%.3f,%.3f\n", pat_names[pat], size, n, t[0], t[1], t[2], t[3], t[4]);
        }
    }
    if (csv) fclose(csv);
    for (int k = 0; k < 2; k++) {
        if (peer_send[k] && (k == 0 || size > 2)) cudaIpcCloseMemHandle(peer_send[k]);
        if (peer_stage[k] && (k == 0 || size > 2)) cudaIpcCloseMemHandle(peer_stage[k]);
    }
    ncclCommDestroy(nc);
    MPI_Finalize();
    return failed;
}
