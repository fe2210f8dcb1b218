/* gpu_nocuda: device point-to-point with a rank that never uses CUDA.
 *
 * Rank 0 sends from device memory to rank 1 (MPI_Send and MPI_Isend + MPI_Wait, 64 KiB and
 * 4 MiB); rank 1 never calls CUDA (the CUDA driver is not in its process when it starts
 * receiving) and receives into malloc buffers with MPI_Recv, MPI_Irecv + MPI_Wait and MPI_Probe +
 * MPI_Recv; then rank 1 sends host data that rank 0 receives into device memory. Checks the
 * return codes, the counts (the probe's included), the bytes, and that nothing is written past
 * the message. With NCCLMPI_P2P_ENVELOPE=device the device sends travel as envelopes whose
 * payload rank 1 must read from rank 0's GPU: it loads the CUDA driver to do so. Then an
 * MPI_Neighbor_alltoall of 64 KiB blocks on a periodic ring, rank 0's in device memory, the others'
 * in host memory (as point-to-point with device envelopes). Exits 77 when rank 0 has no GPU or
 * there is one rank.
 */
#include "gpu_common.h"

static int rank, failures;

static unsigned char pat(int who, int msg, size_t i) { return (unsigned char)(who * 61 + msg * 17 + i * 7 + (i >> 9)); }

#define NMSG 6
#define POISON 0x5A

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int had_driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
    int ok = 1;
    if (rank == 0) {
        int n = 0;
        ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok || size < 2) {
        if (rank == 0) printf("gpu_nocuda: SKIP (needs a GPU on rank 0 and two ranks)\n");
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const size_t sizes[2] = {64u << 10, 4u << 20}, back = 64u << 10;
    if (rank == 0) {
        CUDACHECK(cudaSetDevice(0));
        for (int m = 0; m < NMSG; m++) {
            const size_t n = sizes[m % 2];
            unsigned char *h = malloc(n);
            for (size_t i = 0; i < n; i++) h[i] = pat(0, m, i);
            void *d = NULL;
            CUDACHECK(cudaMalloc(&d, n));
            CUDACHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
            int rc;
            if (m % 3 == 1) {
                MPI_Request q;
                rc = MPI_Isend(d, (int)n, MPI_BYTE, 1, m, MPI_COMM_WORLD, &q);
                if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
            } else {
                rc = MPI_Send(d, (int)n, MPI_BYTE, 1, m, MPI_COMM_WORLD);
            }
            GPU_CHECK(rc == MPI_SUCCESS, "message %d (%zu bytes) from device memory: send returned %d", m, n, rc);
            CUDACHECK(cudaFree(d));
            free(h);
        }
        void *d = NULL;
        CUDACHECK(cudaMalloc(&d, back + 64));
        CUDACHECK(cudaMemset(d, POISON, back + 64));
        MPI_Status st;
        int rc = MPI_Recv(d, (int)back, MPI_BYTE, 1, 99, MPI_COMM_WORLD, &st), count = -1;
        MPI_Get_count(&st, MPI_BYTE, &count);
        GPU_CHECK(rc == MPI_SUCCESS && count == (int)back, "host message into device memory: rc %d, count %d", rc, count);
        unsigned char *h = malloc(back + 64);
        CUDACHECK(cudaMemcpy(h, d, back + 64, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < back + 64; i++)
            if (h[i] != (i < back ? pat(1, 99, i) : POISON)) {
                GPU_CHECK(0, "host message into device memory: byte %zu is 0x%02x", i, h[i]);
                break;
            }
        free(h);
        CUDACHECK(cudaFree(d));
    } else if (rank == 1) {
        GPU_CHECK(!had_driver, "the CUDA driver was in rank 1's process before any receive: the case is not tested");
        for (int m = 0; m < NMSG; m++) {
            const size_t n = sizes[m % 2];
            unsigned char *b = malloc(n + 64);
            memset(b, POISON, n + 64);
            MPI_Status st;
            int rc, count = -1;
            const char *how = m % 3 == 0 ? "MPI_Recv" : m % 3 == 1 ? "MPI_Irecv + MPI_Wait" : "MPI_Probe + MPI_Recv";
            if (m % 3 == 1) {
                MPI_Request q;
                rc = MPI_Irecv(b, (int)n, MPI_BYTE, 0, m, MPI_COMM_WORLD, &q);
                if (rc == MPI_SUCCESS) rc = MPI_Wait(&q, &st);
            } else {
                if (m % 3 == 2) {
                    rc = MPI_Probe(0, m, MPI_COMM_WORLD, &st);
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    GPU_CHECK(rc == MPI_SUCCESS && count == (int)n, "message %d: %s: the probe returned %d, count %d (want %zu)", m,
                              how, rc, count, n);
                }
                rc = MPI_Recv(b, (int)n, MPI_BYTE, 0, m, MPI_COMM_WORLD, &st);
            }
            MPI_Get_count(&st, MPI_BYTE, &count);
            GPU_CHECK(rc == MPI_SUCCESS && count == (int)n, "message %d (%zu bytes) by %s: rc %d, count %d", m, n, how, rc, count);
            for (size_t i = 0; i < n + 64; i++)
                if (b[i] != (i < n ? pat(0, m, i) : POISON)) {
                    GPU_CHECK(0, "message %d (%zu bytes) by %s: byte %zu is 0x%02x", m, n, how, i, b[i]);
                    break;
                }
            free(b);
        }
        unsigned char *h = malloc(back);
        for (size_t i = 0; i < back; i++) h[i] = pat(1, 99, i);
        int rc = MPI_Send(h, (int)back, MPI_BYTE, 0, 99, MPI_COMM_WORLD);
        GPU_CHECK(rc == MPI_SUCCESS, "host message to device memory: send returned %d", rc);
        free(h);
    }
    /* a neighbourhood collective on a ring, rank 0's blocks in device memory, the others' in host
     * memory (where envelopes reach device memory every rank runs it as point-to-point, rank 1
     * too, which has no CUDA of its own) */
    {
        int per = 1, minus, plus;
        MPI_Comm ring;
        MPI_Cart_create(MPI_COMM_WORLD, 1, &size, &per, 0, &ring);
        MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
        MPI_Cart_shift(ring, 0, 1, &minus, &plus);
        const size_t nb = 64u << 10;
        unsigned char *hs = malloc(2 * nb), *hr = malloc(2 * nb);
        for (int j = 0; j < 2; j++)
            for (size_t i = 0; i < nb; i++) hs[j * nb + i] = pat(rank, 40 + j, i);
        memset(hr, POISON, 2 * nb);
        void *s = hs, *r = hr;
        if (rank == 0) {
            CUDACHECK(cudaMalloc(&s, 2 * nb));
            CUDACHECK(cudaMalloc(&r, 2 * nb));
            CUDACHECK(cudaMemcpy(s, hs, 2 * nb, cudaMemcpyHostToDevice));
            CUDACHECK(cudaMemcpy(r, hr, 2 * nb, cudaMemcpyHostToDevice));
        }
        int rc = MPI_Neighbor_alltoall(s, (int)nb, MPI_BYTE, r, (int)nb, MPI_BYTE, ring);
        GPU_CHECK(rc == MPI_SUCCESS, "MPI_Neighbor_alltoall on the ring returned %d", rc);
        if (rank == 0) CUDACHECK(cudaMemcpy(hr, r, 2 * nb, cudaMemcpyDeviceToHost));
        /* block 0 comes from -1, which sent its block 1 (toward +1); block 1 from +1, its block 0 */
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < nb; i++)
                if (hr[k * nb + i] != pat(k ? plus : minus, 40 + (k ? 0 : 1), i)) {
                    GPU_CHECK(0, "MPI_Neighbor_alltoall on the ring (%s buffers): block %d byte %zu is 0x%02x", rank ? "host" : "device",
                              k, i, hr[k * nb + i]);
                    break;
                }
        if (rank == 0) {
            CUDACHECK(cudaFree(s));
            CUDACHECK(cudaFree(r));
        }
        free(hs);
        free(hr);
        MPI_Comm_free(&ring);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_nocuda: %s (%d failure(s))\n", all ? "FAIL" : "ok", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
