/* ncclmpi: the copy kernel nm_copyv (copyv.cuh), as its kernel and its host callers share it.
 * Plain C: nvcc and the host compiler both read it.
 *
 * One launch copies up to NM_COPYV_MAX independent regions (device memory, or a peer's mapped
 * over NVLink), each described by destination, source and size, passed in the kernel's
 * parameters (a list in host memory would make every thread read across PCIe). Block (x, y) of
 * a grid (X, n) copies its share of region y in 16-byte words; the callers pass 16-byte-aligned
 * addresses (a size need not be a multiple of 16). Replaces n copy calls of the driver (about
 * 3 us of host time each on H200) by one launch (about 3 us in all). */
#ifndef NM_COPYV_ABI_H
#define NM_COPYV_ABI_H

#define NM_COPYV_MAX 64
#define NM_COPYV_THREADS 256
#define NM_COPYV_KERNEL "nm_copyv"

typedef struct nm_copyv_region {
    char *dst;
    const char *src;
    unsigned long long bytes;
} nm_copyv_region_t;

typedef struct nm_copyv_args {
    nm_copyv_region_t r[NM_COPYV_MAX];
} nm_copyv_args_t;

#endif
