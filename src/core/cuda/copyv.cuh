// ncclmpi: the copy kernel (copyv_abi.h). Part of the library's fatbin (fatbin.cu).
#include <stdint.h>

#include "copyv_abi.h"

extern "C" __global__ void __launch_bounds__(NM_COPYV_THREADS) nm_copyv(nm_copyv_args_t a)
{
    const nm_copyv_region_t r = a.r[blockIdx.y];
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    const size_t words = r.bytes / 16;
    int4 *dst = (int4 *)r.dst;
    const int4 *src = (const int4 *)r.src;
    size_t i = t;
    for (; i + 3 * step < words; i += 4 * step) {  // four loads in flight per thread (a peer's memory is far)
        const int4 w0 = src[i], w1 = src[i + step], w2 = src[i + 2 * step], w3 = src[i + 3 * step];
        dst[i] = w0;
        dst[i + step] = w1;
        dst[i + 2 * step] = w2;
        dst[i + 3 * step] = w3;
    }
    for (; i < words; i += step) dst[i] = src[i];
    for (size_t k = words * 16 + t; k < r.bytes; k += step) r.dst[k] = r.src[k];  // the tail
}
