/* C side of the Fortran device tests: pick a GPU, allocate device memory and copy to and from
 * it. The Fortran programs hold the device addresses as arrays (c_f_pointer) and pass them to
 * MPI, as a CUDA-aware Fortran code would; they never touch them on the host. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stddef.h>

/* 0: no usable GPU; else the number of GPUs (device local_rank % n is selected) */
int nmt_dev_select(void)
{
    int n = 0, lrank = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 0;
    MPI_Comm node;
    PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    PMPI_Comm_rank(node, &lrank);
    PMPI_Comm_free(&node);
    return cudaSetDevice(lrank % n) == cudaSuccess ? n : 0;
}

void *nmt_dev_alloc(long long bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, (size_t)bytes) == cudaSuccess ? p : NULL;
}

int nmt_dev_put(void *dev, const void *host, long long bytes)
{
    return cudaMemcpy(dev, host, (size_t)bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 1;
}

int nmt_dev_get(void *host, const void *dev, long long bytes)
{
    return cudaMemcpy(host, dev, (size_t)bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : 1;
}

void nmt_dev_free(void *dev) { cudaFree(dev); }
