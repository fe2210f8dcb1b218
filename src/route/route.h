/* ncclmpi: pure routing decisions. No side effects, no GPU, no MPI calls: unit-testable.
 *
 * The core fills an nm_route_in_t from the call's description (buffer kinds, datatype and op
 * mapping, communicator capability) and nm_route() says which path runs it and why.
 */
#ifndef NM_ROUTE_ROUTE_H
#define NM_ROUTE_ROUTE_H
#include <mpi.h>
#include <stddef.h>
#include "ncclmpi.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NM_MEM_HOST = 0, NM_MEM_DEVICE = 1, NM_MEM_MANAGED = 2, NM_MEM_PINNED = 3 } nm_memkind_t;

#define NM_UNSUPPORTED (-1)

typedef enum {
    NM_WHY_HOST_BUFFERS,  /* every significant buffer is host memory */
    NM_WHY_DISABLED,      /* NCCLMPI_DISABLE=1 */
    NM_WHY_NCCL,          /* NCCL can do it */
    NM_WHY_FORCED,        /* NCCLMPI_FORCE_STAGED=1 */
    NM_WHY_OP,            /* reduction op has no NCCL equivalent */
    NM_WHY_TYPE,          /* datatype has no NCCL equivalent for this reduction */
    NM_WHY_NONCONTIG,     /* datatype is not contiguous bytes */
    NM_WHY_COMM,          /* communicator cannot use NCCL (shared GPU, no GPU, intercomm) */
    NM_WHY_MIXED,         /* host and device buffers in one call */
    NM_WHY_KIND,          /* operation has no NCCL path (scan, exscan, alltoallw) */
    NM_WHY_P2P,           /* point-to-point on device buffers goes through the staged path */
    NM_WHY_PERSISTENT,    /* persistent requests on device buffers: not supported */
    NM_WHY_DEVICES,       /* buffers on two different devices in one call: error */
    NM_WHY_SIGNATURE,     /* send and receive type signatures differ in bytes: staged, MPI decides */
    NM_WHY_COUNT_
} nm_why_t;

typedef struct nm_route_in {
    int kind;          /* nm_opkind_t */
    unsigned flags;    /* NM_OPF_* */
    int any_device;    /* some significant buffer is device (or managed routed as device) */
    int any_host;      /* some significant, non-empty buffer is host memory */
    int devices_differ;/* device buffers live on more than one device */
    int comm_nccl;     /* communicator may use NCCL (intracomm, distinct GPUs); 0 = staged only */
    int nccl_type;     /* reductions: NCCL type of the datatype, or NM_UNSUPPORTED */
    int nccl_op;       /* reductions: NCCL op, or NM_UNSUPPORTED */
    int s_contig;      /* send datatype(s) are contiguous bytes */
    int r_contig;      /* receive datatype(s) are contiguous bytes */
    int bytes_match;   /* data movement: send and receive byte counts agree */
    int disable;       /* NCCLMPI_DISABLE */
    int force_staged;  /* NCCLMPI_FORCE_STAGED */
} nm_route_in_t;

typedef struct nm_decision {
    ncclmpi_route_t route;
    nm_why_t why;
} nm_decision_t;

nm_decision_t nm_route(const nm_route_in_t *in);
const char *nm_why_str(nm_why_t why);
const char *nm_route_str(ncclmpi_route_t r);

/* ---- datatype and op maps (designated tables, NM_UNSUPPORTED when NCCL lacks it) ---- */
/* NCCL type used when this predefined datatype is *reduced*; NM_UNSUPPORTED otherwise. */
int nm_map_dtype(MPI_Datatype dt);
/* NCCL op for a predefined op; NM_UNSUPPORTED for everything else. */
int nm_map_op(MPI_Op op);
/* Name of a predefined datatype, or NULL. */
const char *nm_dtype_name(MPI_Datatype dt);
/* Element size of a predefined datatype as NCCL sees it (0 when not mapped). */
size_t nm_nccl_type_size(int nccl_type);

#ifdef __cplusplus
}
#endif
#endif
