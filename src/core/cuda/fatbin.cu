// ncclmpi: every kernel of the library, compiled by nvcc into the one fatbin that the library
// embeds (src/gen/kernels_fatbin.c) and loads per context with the driver API (kernels.cc).
#include "cuda/copyv.cuh"
#include "tl/oneshot/oneshot_kernels.cuh"
