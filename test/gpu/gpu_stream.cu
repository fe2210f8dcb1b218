// gpu_stream: a kernel writes the send buffer on the legacy default stream and MPI_Allreduce is
// called right after, with no synchronisation. A CUDA-aware MPI must see the kernel's data
// (ncclmpi orders its comm stream after the default stream). Checked for NCCL-able and staged
// operations, blocking and nonblocking.
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>

#define CUDACHECK(x)                                                                          \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));       \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                     \
        }                                                                                     \
    } while (0)

// Spins ~`ns` nanoseconds, then writes value v(i) = rank + i % 97 + 1.
__global__ void slow_fill(int *p, int n, int rank, long long ns)
{
    long long t0 = clock64();
    long long cycles = ns * 2;  // ~2 GHz; "long enough" is all that matters
    while (clock64() - t0 < cycles) {}
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = rank + i % 97 + 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, ndev, lrank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    CUDACHECK(cudaGetDeviceCount(&ndev));
    CUDACHECK(cudaSetDevice(lrank % ndev));
    const int n = (1 << 22) + 5;
    int *d_in, *d_out, *h = (int *)malloc(n * sizeof(int));
    CUDACHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDACHECK(cudaMalloc(&d_out, n * sizeof(int)));
    int failures = 0;
    MPI_Op ops[2] = {MPI_SUM, MPI_BOR};  // NCCL path and staged path
    for (int variant = 0; variant < 4; variant++) {
        MPI_Op op = ops[variant & 1];
        int nb = variant >> 1;
        CUDACHECK(cudaMemset(d_in, 0, n * sizeof(int)));
        CUDACHECK(cudaMemset(d_out, 0xff, n * sizeof(int)));
        CUDACHECK(cudaDeviceSynchronize());
        slow_fill<<<64, 256>>>(d_in, n, rank, 50 * 1000 * 1000);  // 50 ms, legacy default stream
        CUDACHECK(cudaGetLastError());
        MPI_Request req;
        if (nb) {
            MPI_Iallreduce(d_in, d_out, n, MPI_INT, op, MPI_COMM_WORLD, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Allreduce(d_in, d_out, n, MPI_INT, op, MPI_COMM_WORLD);
        }
        CUDACHECK(cudaMemcpy(h, d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) {
            long long want = 0;
            for (int r = 0; r < size; r++) want = op == MPI_SUM ? want + (r + i % 97 + 1) : (want | (r + i % 97 + 1));
            if (h[i] != (int)want) {
                fprintf(stderr, "[rank %d] FAIL variant %d (%s, %s): element %d = %d, want %lld\n", rank, variant,
                        op == MPI_SUM ? "SUM" : "BOR", nb ? "Iallreduce" : "Allreduce", i, h[i], want);
                failures++;
                break;
            }
        }
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_stream: %d ranks, kernel-written send buffers: %d failure(s)\n", size, total);
    cudaFree(d_in);
    cudaFree(d_out);
    free(h);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return total ? 1 : 0;
}
