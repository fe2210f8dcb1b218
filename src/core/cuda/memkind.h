/* ncclmpi: where does a buffer live? Host memory unless the CUDA driver is in the process and
 * says otherwise. C API: the Fortran delegates use it too. */
#ifndef NM_CORE_MEMKIND_H
#define NM_CORE_MEMKIND_H
#include "route/route.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Kind of the memory at p (NULL, MPI_IN_PLACE, MPI_BOTTOM: host). *dev gets the device
 * ordinal for device and managed memory. */
nm_memkind_t nm_mem_kind(const void *p, int *dev);
/* 1 when p lies where the CUDA driver never maps memory (the calling thread's live stack, the
 * program break's range, the main program's static data): host memory, without asking it. */
int nm_mem_known_host(const void *p);
/* 1 when p is memory that ncclmpi routes as device memory (device, or managed unless
 * NCCLMPI_MANAGED=host). */
int nm_mem_is_device(const void *p);
/* The same, with *dev (when asked) the device ordinal the driver gives (-1 for managed memory it
 * does not place). */
int nm_mem_device(const void *p, int *dev);
/* Look at libraries loaded since the last look; attach the CUDA driver if it arrived.
 * Returns 1 when the driver is attached. */
int nm_linkmap_refresh(void);
/* 1 when this machine has NVIDIA GPUs (the driver's device node or its /proc entry), asked
 * without loading CUDA. */
int nm_gpu_node(void);

#ifdef __cplusplus
}
#endif
#endif
