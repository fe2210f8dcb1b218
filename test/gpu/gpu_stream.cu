// gpu_stream: a kernel writes the send buffer on the legacy default stream and MPI_Allreduce is
// called right after, with no synchronisation. A CUDA-aware MPI must see the kernel's data
// (ncclmpi orders its comm stream after the default stream). Checked for NCCL-able and staged
// operations, blocking and nonblocking, and inside an explicit ncclmpi group (the kernel launched
// before the group, or inside it before the call); and a kernel still writing a device receive
// buffer when a staged receive is posted must finish before the message lands.
#include <cuda_runtime.h>
#include <dlfcn.h>
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
    // ncclmpi's explicit groups (variants 4 and 5), where the library is loaded
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    const int nvariants = gbegin && gend ? 6 : 4;
    for (int variant = 0; variant < nvariants; variant++) {
        MPI_Op op = variant >= 4 ? MPI_SUM : ops[variant & 1];
        int nb = variant >= 4 ? 1 : variant >> 1;
        int group = variant >= 4 ? variant - 3 : 0;  // 1: kernel before the group; 2: inside it
        CUDACHECK(cudaMemset(d_in, 0, n * sizeof(int)));
        CUDACHECK(cudaMemset(d_out, 0xff, n * sizeof(int)));
        CUDACHECK(cudaDeviceSynchronize());
        if (group == 2) gbegin();
        slow_fill<<<64, 256>>>(d_in, n, rank, 50 * 1000 * 1000);  // 50 ms, legacy default stream
        CUDACHECK(cudaGetLastError());
        MPI_Request req;
        if (group) {
            if (group == 1) gbegin();
            MPI_Iallreduce(d_in, d_out, n, MPI_INT, op, MPI_COMM_WORLD, &req);
            if (gend() != MPI_SUCCESS) {
                fprintf(stderr, "[rank %d] FAIL variant %d: ncclmpi_group_end failed\n", rank, variant);
                failures++;
            }
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else if (nb) {
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
                fprintf(stderr, "[rank %d] FAIL variant %d (%s, %s%s): element %d = %d, want %lld\n", rank, variant,
                        op == MPI_SUM ? "SUM" : "BOR", nb ? "Iallreduce" : "Allreduce",
                        group == 1 ? ", kernel before the group" : group == 2 ? ", kernel inside the group" : "", i,
                        h[i], want);
                failures++;
                break;
            }
        }
    }
    // The receive side (staged point-to-point): a slow kernel still writing the receive buffer
    // when MPI_Irecv/MPI_Recv is called must finish first; the message then overwrites it (its
    // values differ from the kernel's). Ring: from rank - 1, to rank + 1 (a host buffer, sent at once).
    const int from = (rank + size - 1) % size, to = (rank + 1) % size;
    for (int nb = 0; nb < 2 && size > 1; nb++) {
        CUDACHECK(cudaMemset(d_out, 0, n * sizeof(int)));
        CUDACHECK(cudaDeviceSynchronize());
        MPI_Barrier(MPI_COMM_WORLD);
        slow_fill<<<64, 256>>>(d_out, n, rank, 50 * 1000 * 1000);
        CUDACHECK(cudaGetLastError());
        MPI_Request rq[2];
        int *hs = (int *)malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) hs[i] = -(rank * 1000 + i % 89) - 1;
        if (nb) {
            MPI_Irecv(d_out, n, MPI_INT, from, 5, MPI_COMM_WORLD, &rq[0]);
            MPI_Isend(hs, n, MPI_INT, to, 5, MPI_COMM_WORLD, &rq[1]);
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        } else {
            MPI_Sendrecv(hs, n, MPI_INT, to, 5, d_out, n, MPI_INT, from, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        free(hs);
        CUDACHECK(cudaMemcpy(h, d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) {
            const int want = -(from * 1000 + i % 89) - 1;
            if (h[i] != want) {
                fprintf(stderr, "[rank %d] FAIL receive after a kernel (%s): element %d = %d, want %d\n", rank,
                        nb ? "Irecv" : "Sendrecv", i, h[i], want);
                failures++;
                break;
            }
        }
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_stream: %d ranks, kernel-written send and receive buffers: %d failure(s)\n", size, total);
    cudaFree(d_in);
    cudaFree(d_out);
    free(h);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return total ? 1 : 0;
}
