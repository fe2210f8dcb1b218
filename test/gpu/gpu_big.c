/* gpu_big: messages of more than 2^31 bytes on device buffers (issue 38, 4d), at 1 or 2 ranks:
 *  - the staged pipeline (run with NCCLMPI_FORCE_STAGED=1): MPI_Allreduce of 2^31 + 2^20 bytes of
 *    floats and MPI_Bcast of as many bytes, against the real MPI on host copies;
 *  - (2 ranks) a receive of more than 2^31 bytes through a non-contiguous datatype (every other
 *    float) of a contiguous send: with NCCLMPI_P2P_ENVELOPE=device the sender's envelope must be
 *    found (a pack of the whole buffer with an int capacity failed: the payload was never pulled);
 *  - (2 ranks, with envelopes) a persistent receive of more than 2^31 bytes: refused with
 *    MPI_ERR_COUNT, or started and received whole, never a wrapped count.
 * Needs about 4 x 2.2 GiB of device and host memory per rank. Exits 77 without a GPU. */
#include "gpu_common.h"

static int rank, size, failures;

enum { EXTRA = 1 << 20 };
static const size_t NF = ((size_t)1 << 29) + EXTRA / 4; /* floats: 2^31 + 2^20 bytes */

static float val(size_t i, int r) { return (float)((i * 7 + (size_t)r * 13) % 1024); }

static void big_coll(void)
{
    const size_t bytes = NF * sizeof(float);
    float *h = malloc(bytes), *hr = malloc(bytes), *d, *dr;
    CUDACHECK(cudaMalloc((void **)&d, bytes));
    CUDACHECK(cudaMalloc((void **)&dr, bytes));
    for (size_t i = 0; i < NF; i++) h[i] = val(i, rank);
    CUDACHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(dr, 0xff, bytes));
    GPU_CHECK(MPI_Allreduce(d, dr, (int)NF, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Allreduce of %zu bytes", bytes);
    GPU_CHECK(PMPI_Allreduce(h, hr, (int)NF, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "PMPI_Allreduce");
    CUDACHECK(cudaMemcpy(h, dr, bytes, cudaMemcpyDeviceToHost));
    GPU_CHECK(!memcmp(h, hr, bytes), "MPI_Allreduce of %zu bytes differs from the real MPI's", bytes);
    for (size_t i = 0; i < NF; i++) h[i] = rank == 0 ? val(i, 5) : -1;
    CUDACHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    GPU_CHECK(MPI_Bcast(d, (int)NF, MPI_FLOAT, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Bcast of %zu bytes", bytes);
    CUDACHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    while (bad < NF && h[bad] == val(bad, 5)) bad++;
    GPU_CHECK(bad == NF, "MPI_Bcast of %zu bytes: float %zu wrong", bytes, bad);
    CUDACHECK(cudaFree(d));
    CUDACHECK(cudaFree(dr));
    free(h);
    free(hr);
}

/* rank 0 sends NF contiguous floats; rank 1 receives them at every other float */
static void big_strided_recv(void)
{
    const size_t bytes = NF * sizeof(float);
    MPI_Datatype every_other;
    MPI_Type_vector((int)NF, 1, 2, MPI_FLOAT, &every_other);
    MPI_Type_commit(&every_other);
    float *h = malloc(2 * bytes), *d;
    CUDACHECK(cudaMalloc((void **)&d, rank == 0 ? bytes : 2 * bytes));
    if (rank == 0) {
        for (size_t i = 0; i < NF; i++) h[i] = val(i, 3);
        CUDACHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
        GPU_CHECK(MPI_Send(d, (int)NF, MPI_FLOAT, 1, 7, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send of %zu bytes", bytes);
    } else if (rank == 1) {
        CUDACHECK(cudaMemset(d, 0xff, 2 * bytes));
        MPI_Status st;
        GPU_CHECK(MPI_Recv(d, 1, every_other, 0, 7, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "MPI_Recv of %zu bytes", bytes);
        MPI_Count n = 0;
        MPI_Get_elements_x(&st, MPI_BYTE, &n);
        GPU_CHECK((size_t)n == bytes, "MPI_Recv of %zu bytes: the status counts %lld", bytes, (long long)n);
        CUDACHECK(cudaMemcpy(h, d, 2 * bytes, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        while (bad < NF && h[2 * bad] == val(bad, 3)) bad++;
        GPU_CHECK(bad == NF, "MPI_Recv through a vector of %zu bytes: float %zu wrong (%g)", bytes, bad, bad < NF ? h[2 * bad] : 0);
    }
    CUDACHECK(cudaFree(d));
    free(h);
    MPI_Type_free(&every_other);
}

/* a persistent receive of more than 2^31 bytes where envelopes are on: its init refuses it with
 * MPI_ERR_COUNT (a receive forwarded with an int count), or it succeeds and a start receives the
 * message whole (ncclmpi restarts it as the MPI_Irecv it stands for); never a wrapped count. Rank
 * 0 sends only where rank 1's init succeeded. */
static void big_persistent(void)
{
    if (rank > 1) {
        int ok = 0;
        MPI_Bcast(&ok, 1, MPI_INT, 1, MPI_COMM_WORLD);
        return;
    }
    const size_t bytes = NF * sizeof(float);
    float *d, *h = malloc(bytes);
    CUDACHECK(cudaMalloc((void **)&d, bytes));
    MPI_Request q = MPI_REQUEST_NULL;
    int ok = 0;
    if (rank == 1) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        const int rc = MPI_Recv_init(d, (int)NF, MPI_FLOAT, 0, 9, MPI_COMM_WORLD, &q);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        GPU_CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_COUNT, "MPI_Recv_init of %zu bytes: class %d, want success or MPI_ERR_COUNT",
                  bytes, cls);
        ok = rc == MPI_SUCCESS;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 1, MPI_COMM_WORLD);
    if (ok && rank == 0) {
        for (size_t i = 0; i < NF; i++) h[i] = val(i, 4);
        CUDACHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
        GPU_CHECK(MPI_Send(d, (int)NF, MPI_FLOAT, 1, 9, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send of %zu bytes", bytes);
    } else if (ok) {
        CUDACHECK(cudaMemset(d, 0xff, bytes));
        MPI_Status st;
        GPU_CHECK(MPI_Start(&q) == MPI_SUCCESS && MPI_Wait(&q, &st) == MPI_SUCCESS, "a start of the persistent receive of %zu bytes",
                  bytes);
        MPI_Count n = 0;
        MPI_Get_elements_x(&st, MPI_BYTE, &n);
        GPU_CHECK((size_t)n == bytes, "the persistent receive of %zu bytes: the status counts %lld", bytes, (long long)n);
        CUDACHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        while (bad < NF && h[bad] == val(bad, 4)) bad++;
        GPU_CHECK(bad == NF, "the persistent receive of %zu bytes: float %zu wrong (%g)", bytes, bad, bad < NF ? h[bad] : 0);
    }
    if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
    CUDACHECK(cudaFree(d));
    free(h);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (rank == 0) printf("gpu_big: skipped (no GPU)\n");
        MPI_Finalize();
        return 77;
    }
    CUDACHECK(cudaSetDevice(rank % ndev));
    big_coll();
    if (size >= 2) {
        big_strided_recv();
        big_persistent();
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_big: %s (%d ranks, %d failures)\n", all ? "FAIL" : "ok", size, all);
    MPI_Finalize();
    return all ? 1 : 0;
}
