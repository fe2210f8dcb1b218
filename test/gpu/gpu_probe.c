/* gpu_probe: exit 0 when a CUDA GPU is usable, 77 (CTest's skip code) otherwise. */
#include <cuda_runtime.h>
#include <stdio.h>
int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("no usable GPU (%s): gpu tests skipped\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    printf("%d GPU(s)\n", n);
    return 0;
}
