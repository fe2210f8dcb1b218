/* A stand-in for libcuda.so.1 with three GPUs, for `ncclmpi_info -p` on machines without one
 * (test/unit/info.sh): GPU0-GPU1 NVLink (peer access with native atomics), GPU0-GPU2 PCIe (peer
 * access only), GPU1-GPU2 no peer access. Names go through cuda.h's macros (cuDeviceTotalMem ->
 * cuDeviceTotalMem_v2), as the real driver exports them. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 12040; return CUDA_SUCCESS; }
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) { *s = "CUDA_ERROR_FAKE"; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 3; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int i)
{
    if (i < 0 || i > 2) return CUDA_ERROR_INVALID_DEVICE;
    *d = i;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, (size_t)len, "Fake GPU %d", d); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { memset(u->bytes, 0x10 + d, sizeof(u->bytes)); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice d) { snprintf(bus, (size_t)len, "0000:%02X:00.0", 0x81 + d); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) { *bytes = (size_t)80 << 30; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
    return CUDA_SUCCESS;
}
static int peer(CUdevice a, CUdevice b) { return a != b && !((a == 1 && b == 2) || (a == 2 && b == 1)); }
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) { *can = peer(a, b); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute attr, CUdevice a, CUdevice b)
{
    int nvlink = (a == 0 && b == 1) || (a == 1 && b == 0);
    switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *v = peer(a, b); break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *v = nvlink; break;
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *v = nvlink ? 0 : 1; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}
