/* ncclmpi: one status type for the core; converted to MPI error classes only at the boundary. */
#ifndef NM_UTIL_STATUS_H
#define NM_UTIL_STATUS_H
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NM_OK = 0,
    NM_INPROGRESS = 1,
    NM_ERR_ARG = -1,         /* bad argument: MPI_ERR_ARG */
    NM_ERR_BUFFER = -2,      /* unusable buffer: MPI_ERR_BUFFER */
    NM_ERR_COUNT = -3,       /* MPI_ERR_COUNT */
    NM_ERR_TYPE = -4,        /* MPI_ERR_TYPE */
    NM_ERR_ROOT = -5,        /* MPI_ERR_ROOT */
    NM_ERR_COMM = -6,        /* MPI_ERR_COMM */
    NM_ERR_OP = -7,          /* MPI_ERR_OP */
    NM_ERR_NO_MEM = -8,      /* MPI_ERR_NO_MEM */
    NM_ERR_CUDA = -9,        /* CUDA driver failure: MPI_ERR_OTHER */
    NM_ERR_NCCL = -10,       /* NCCL failure: MPI_ERR_OTHER */
    NM_ERR_TIMEOUT = -11,    /* timeout: MPI_ERR_OTHER */
    NM_ERR_UNSUPPORTED = -12,/* not supported on device buffers yet: MPI_ERR_UNSUPPORTED_OPERATION */
    NM_ERR_INTERNAL = -13,   /* MPI_ERR_INTERN */
    NM_ERR_MPI = -14,        /* the real MPI failed; its code is kept beside */
    NM_ERR_TRUNCATE = -15    /* a message larger than its receive buffer: MPI_ERR_TRUNCATE */
} nm_status_t;

const char *nm_status_str(nm_status_t st);

#ifdef __cplusplus
}
#endif
#endif
