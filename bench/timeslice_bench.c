/* timeslice_bench: what one GPU operation costs when every rank of the job issues it at the same
 * moment (after a barrier), each rank on the GPU of its node-local rank modulo the GPUs it sees.
 * Run with more ranks than GPUs to see what ranks sharing a GPU pay: without MPS the GPU runs one
 * process's work at a time and switches between processes in time slices, and some operations wait
 * for another process's slice. Each operation is issued and synchronised REP times; per rank the
 * median; printed: the slowest rank's median, with the time of the same operation on one rank
 * alone (rank 0, the others waiting in a barrier).
 *   mpirun -np 2 bench/timeslice_bench [REP, 200]      (no ncclmpi needed: plain driver calls)
 * Operations: a 128 KiB copy inside the GPU; a 128 KiB copy from the node-local neighbour rank's
 * buffer mapped with CUDA IPC (where it sees the same GPUs); an 8-byte memset; copies to the
 * device from pinned memory of 8, 16, 32 and 64 KiB; copies to pinned host memory of 8 and
 * 128 KiB; a 64-bit stream memory write into device memory; an event recorded and waited for.
 * Driver API only (links libcuda); every operation on the legacy default stream. */
#include "bench_util.h"

#define CK_PROG "timeslice_bench"
#define CK_FAIL() MPI_Abort(MPI_COMM_WORLD, 1)
#include "cu_check.h"

enum { BIG = 128 << 10 };
enum { OP_D2D, OP_IPC, OP_MEMSET, OP_H2D8, OP_H2D16, OP_H2D32, OP_H2D64, OP_D2H8, OP_D2H128, OP_WRITE, OP_EVENT, NOP };
static const char *const op_names[NOP] = {
    "copy inside the GPU, 128 KiB", "copy from the neighbour's buffer (CUDA IPC), 128 KiB", "memset, 8 B",
    "copy to the device from pinned memory, 8 KiB", "the same, 16 KiB", "the same, 32 KiB", "the same, 64 KiB",
    "copy to pinned host memory, 8 KiB", "the same, 128 KiB", "cuStreamWriteValue64 into device memory",
    "event record + synchronise"};

static CUdeviceptr dbuf, dbuf2, peer;
static char *pinned;
static CUevent ev;

static void run_op(int op, int it)
{
    const CUstream s = CU_STREAM_LEGACY;
    switch (op) {
    case OP_D2D: CK(cuMemcpyAsync(dbuf2, dbuf, BIG, s)); break;
    case OP_IPC: CK(cuMemcpyAsync(dbuf2, peer, BIG, s)); break;
    case OP_MEMSET: CK(cuMemsetD8Async(dbuf2, (unsigned char)it, 8, s)); break;
    case OP_H2D8: CK(cuMemcpyHtoDAsync(dbuf2, pinned, 8 << 10, s)); break;
    case OP_H2D16: CK(cuMemcpyHtoDAsync(dbuf2, pinned, 16 << 10, s)); break;
    case OP_H2D32: CK(cuMemcpyHtoDAsync(dbuf2, pinned, 32 << 10, s)); break;
    case OP_H2D64: CK(cuMemcpyHtoDAsync(dbuf2, pinned, 64 << 10, s)); break;
    case OP_D2H8: CK(cuMemcpyDtoHAsync(pinned, dbuf, 8 << 10, s)); break;
    case OP_D2H128: CK(cuMemcpyDtoHAsync(pinned, dbuf, BIG, s)); break;
    case OP_WRITE: CK(cuStreamWriteValue64(s, dbuf2, (cuuint64_t)it, 0)); break;
    default: CK(cuEventRecord(ev, s)); CK(cuEventSynchronize(ev)); return;
    }
    CK(cuStreamSynchronize(s));
}

/* the median of REP timed runs of op on this rank (every rank together when `together`, else
 * rank 0 alone); -1 where the rank did not run it */
static double time_op(int op, int rep, int together, int rank)
{
    double *t = malloc(sizeof(double) * (size_t)rep), med = -1;
    const int mine = together || rank == 0;
    for (int it = 0; it < rep + 5; it++) {  /* (5 warm-up runs) */
        MPI_Barrier(MPI_COMM_WORLD);
        if (!mine) continue;
        const double t0 = bench_now();
        run_op(op, it);
        if (it >= 5) t[it - 5] = 1e6 * (bench_now() - t0);
    }
    if (mine) {
        qsort(t, (size_t)rep, sizeof(double), bench_cmp_double);
        med = t[rep / 2];
    }
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, lrank, lsize, ngpu = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int rep = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 200;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_size(node, &lsize);
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&ngpu));
    CK(cuDeviceGet(&dev, lrank % ngpu));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    int mps = 0;
    if (cuDeviceGetAttribute(&mps, (CUdevice_attribute)133 /* CU_DEVICE_ATTRIBUTE_MPS_ENABLED */, dev) != CUDA_SUCCESS) mps = -1;
    CK(cuMemAlloc(&dbuf, BIG));
    CK(cuMemAlloc(&dbuf2, BIG));
    CK(cuMemsetD8(dbuf, 1, BIG));
    CK(cuMemAllocHost((void **)&pinned, BIG));
    memset(pinned, 2, BIG);
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    /* the node-local neighbour's buffer, mapped (every rank of the node takes part) */
    CUipcMemHandle mineh, *all = malloc(sizeof(CUipcMemHandle) * (size_t)lsize);
    int ipc_ok = cuIpcGetMemHandle(&mineh, dbuf) == CUDA_SUCCESS, ipc_all = 0;
    MPI_Allgather(&mineh, sizeof(mineh), MPI_BYTE, all, sizeof(mineh), MPI_BYTE, node);
    if (ipc_ok && lsize > 1 &&
        cuIpcOpenMemHandle(&peer, all[(lrank + 1) % lsize], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
        ipc_ok = 0;
    ipc_ok = ipc_ok && lsize > 1;
    MPI_Allreduce(&ipc_ok, &ipc_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        char name[128] = "?";
        cuDeviceGetName(name, sizeof(name), dev);
        printf("# timeslice_bench: %d ranks, %d on this node, %d GPU(s) visible (%s), MPS %s; medians of %d, the slowest "
               "rank's, us\n", size, lsize, ngpu, name, mps < 0 ? "unknown" : mps ? "on" : "off", rep);
        printf("%-56s %10s %10s\n", "operation + synchronisation", "alone", "together");
    }
    for (int op = 0; op < NOP; op++) {
        if (op == OP_IPC && !ipc_all) continue;
        double alone = time_op(op, rep, 0, rank), together = time_op(op, rep, 1, rank), worst = 0;
        MPI_Reduce(&together, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%-56s %10.2f %10.2f\n", op_names[op], alone, worst);
    }
    if (peer) cuIpcCloseMemHandle(peer);
    free(all);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
