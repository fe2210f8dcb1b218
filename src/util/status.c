#include "util/status.h"

const char *nm_status_str(nm_status_t st)
{
    switch (st) {
    case NM_OK: return "success";
    case NM_INPROGRESS: return "in progress";
    case NM_ERR_ARG: return "invalid argument";
    case NM_ERR_BUFFER: return "invalid buffer";
    case NM_ERR_COUNT: return "invalid count";
    case NM_ERR_TYPE: return "invalid datatype";
    case NM_ERR_ROOT: return "invalid root";
    case NM_ERR_COMM: return "invalid communicator";
    case NM_ERR_OP: return "invalid operation";
    case NM_ERR_NO_MEM: return "out of memory";
    case NM_ERR_CUDA: return "CUDA error";
    case NM_ERR_NCCL: return "NCCL error";
    case NM_ERR_TIMEOUT: return "timed out";
    case NM_ERR_UNSUPPORTED: return "not supported";
    case NM_ERR_INTERNAL: return "internal error";
    case NM_ERR_MPI: return "MPI error";
    case NM_ERR_TRUNCATE: return "message truncated";
    }
    return "unknown status";
}
