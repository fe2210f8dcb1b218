/* gpu_reject: device buffers passed to MPI functions ncclmpi does not run on device memory (the
 * REJECT rows of mpi_api.def: MPI_Win_attach, MPI_Buffer_attach; packing, MPI_Reduce_local and
 * MPI-IO are staged: gpu_local_staged; one-sided calls: rma_device) fail with MPI_ERR_BUFFER and
 * the message "ncclmpi: MPI_<Name>: device buffers are not supported in this call" through the
 * error handler of their communicator or window (all MPI_ERRORS_RETURN here), and are
 * counted on the error route; the real MPI never sees the pointer (it is not CUDA-aware: it
 * would crash). The same calls on host memory succeed.
 *
 * Then the flush points: a nonblocking device collective queued for coalescing on one rank while
 * that rank blocks in MPI_Win_fence (or MPI_File_sync) and its peer waits for the collective
 * first. ncclmpi must launch the queued collective before the rank blocks, or both wait forever.
 *
 * Collective rejected calls are made by every rank with device memory, as the memory contract
 * says, so every rank fails alike and none waits for another. Runs at 2 ranks.
 */
#include <unistd.h>

#include "gpu_common.h"

static int rank, size, failures;
#define CHECK GPU_CHECK

static int have_stats;

/* rc must be an error of class cls whose string names fn; the call counted once on the error
 * route */
static void expect_error(const char *fn, int rc, int cls, nm_stats_view_t before, int exact_msg)
{
    int c = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING] = "", want[256];
    if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &c);
        MPI_Error_string(rc, msg, &len);
    }
    if (exact_msg) snprintf(want, sizeof(want), "ncclmpi: MPI_%s: device buffers are not supported in this call", fn);
    else snprintf(want, sizeof(want), "ncclmpi: MPI_%s: ", fn);
    CHECK(rc != MPI_SUCCESS && c == cls, "MPI_%s on device memory: rc %d class %d, expected class %d", fn, rc, c, cls);
    CHECK(exact_msg ? !strcmp(msg, want) : !strncmp(msg, want, strlen(want)), "MPI_%s: error string \"%s\"", fn, msg);
    if (have_stats) {
        nm_stats_view_t after = gpu_stats(fn);
        CHECK(after.calls == before.calls + 1 && after.route[NCCLMPI_ROUTE_ERROR] == before.route[NCCLMPI_ROUTE_ERROR] + 1 &&
                  after.route[NCCLMPI_ROUTE_NCCL] == before.route[NCCLMPI_ROUTE_NCCL] &&
                  after.route[NCCLMPI_ROUTE_STAGED] == before.route[NCCLMPI_ROUTE_STAGED],
              "MPI_%s: counters calls %llu->%llu error %llu->%llu", fn, before.calls, after.calls, before.route[NCCLMPI_ROUTE_ERROR],
              after.route[NCCLMPI_ROUTE_ERROR]);
    }
}
/* REJ(Name, args...): MPI_Name(args) must fail with MPI_ERR_BUFFER */
#define REJ(fn, ...)                                                                          \
    do {                                                                                      \
        nm_stats_view_t b_ = gpu_stats(#fn);                                                  \
        int rc_ = MPI_##fn(__VA_ARGS__);                                                      \
        expect_error(#fn, rc_, MPI_ERR_BUFFER, b_, 1);                                        \
    } while (0)
#define HOST_OK(fn, ...)                                                                      \
    do {                                                                                      \
        int rc_ = MPI_##fn(__VA_ARGS__);                                                      \
        CHECK(rc_ == MPI_SUCCESS, "MPI_" #fn " on host memory: rc %d", rc_);                  \
    } while (0)

enum { N = 64 };
static int *d; /* a device buffer of N ints */
static int h[N], h2[N], h3[N];

static void t_p2p_local(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    REJ(Buffer_attach, d, N * (int)sizeof(int));
    /* a neighbourhood collective on a ring, host memory (device buffers: gpu_neighbor) */
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(c, 1, dims, periods, 0, &ring);
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    HOST_OK(Neighbor_allgather, h, N / 2, MPI_INT, h2, N / 2, MPI_INT, ring);
    MPI_Comm_free(&ring);
    MPI_Comm_free(&c);
}

static void t_rma(void)
{
    /* (windows over device memory work, and so do device buffers with host-memory windows:
     * test/mpi/rma_device.c); device memory attached to a dynamic window is refused */
    MPI_Win win;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    REJ(Win_attach, win, d, N * sizeof(int));
    HOST_OK(Win_attach, win, h3, sizeof(h3));
    MPI_Win_detach(win, h3);
    MPI_Win_free(&win);
}

/* A device Iallreduce queued on every rank; rank 0 then blocks in a call that must launch it
 * first (Win_fence / File_sync), rank 1 waits for the Iallreduce before making that call. */
static void t_flush_points(void)
{
    float *x;
    const int n = 1 << 16;
    CUDACHECK(cudaMalloc((void **)&x, n * sizeof(float)));
    MPI_Win win;
    int *base = NULL;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    char path[512] = "";
    if (rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/ncclmpi_gpu_flush.%d.dat", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    }
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, &fh);
    for (int which = 0; which < 2; which++) {
        float *hx = malloc(n * sizeof(float));
        for (int i = 0; i < n; i++) hx[i] = (float)(rank + 1);
        CUDACHECK(cudaMemcpy(x, hx, n * sizeof(float), cudaMemcpyHostToDevice));
        MPI_Request q;
        MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
        if (rank == 0) {
            if (which == 0) MPI_Win_fence(0, win);
            else MPI_File_sync(fh);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            if (which == 0) MPI_Win_fence(0, win);
            else MPI_File_sync(fh);
        }
        CUDACHECK(cudaMemcpy(hx, x, n * sizeof(float), cudaMemcpyDeviceToHost));
        float want = (float)(size * (size + 1) / 2);
        CHECK(hx[0] == want && hx[n - 1] == want, "Iallreduce across %s: %g %g", which ? "File_sync" : "Win_fence",
              hx[0], hx[n - 1]);
        free(hx);
    }
    MPI_File_close(&fh);
    MPI_Win_free(&win);
    cudaFree(x);
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("gpu_reject: no usable GPU: skipped\n");
        return 77;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    alarm(300); /* a flush point that does not flush hangs: end the run instead */
    gpu_select(&ndev);
    have_stats = gpu_stats("Put").calls != (unsigned long long)-1;
    if (!have_stats) { /* the real MPI alone would be handed device pointers: do not try */
        if (rank == 0) printf("gpu_reject: libncclmpi is not in the process (run it through gpu_run.sh)\n");
        MPI_Finalize();
        return 1;
    }
    CUDACHECK(cudaMalloc((void **)&d, N * sizeof(int)));
    t_p2p_local();
    t_rma();
    t_flush_points();
    cudaFree(d);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_reject: %d ranks, %d GPU(s): %d failure(s)\n", size, ndev, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
