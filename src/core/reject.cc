// ncclmpi: calls whose buffers ncclmpi does not run on device memory (the REJECT rows of
// mpi_api.def: MPI_Win_attach, MPI_Buffer_attach; the MPI-4 large-count persistent collectives
// with count arrays, with MPI_ERR_UNSUPPORTED_OPERATION; the RMA rows' device origin buffers where the
// window has no device memory: core/tl/rma/window.cc; the MPI-4 large-count forms' counts above
// INT_MAX on device buffers, with MPI_ERR_COUNT: the LARGE rows). A non-CUDA-aware MPI handed a
// device pointer crashes or reads garbage; these calls fail with MPI_ERR_BUFFER instead, and the
// real MPI never sees the pointer. The generated wrappers call this only off the host fast path.
#include <mpi.h>

#include "core/cuda/cuda_api.h"
#include "core/cuda/memkind.h"
#include "core/dtype/dtype.h"
#include "core/engine/task.h"
#include "interpose/interpose.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"

using namespace ncclmpi;

namespace {

// The error code (one per function: its message names the call), counted as an error route.
int reject_code(int fn, int cls = MPI_ERR_BUFFER)
{
    char msg[MPI_MAX_ERROR_STRING];
    if (cls == MPI_ERR_COUNT)
        snprintf(msg, sizeof(msg), "ncclmpi: MPI_%s: a count above INT_MAX on device buffers is not supported yet",
                 nm_fn_names[fn]);
    else
        snprintf(msg, sizeof(msg), "ncclmpi: MPI_%s: device buffers are not supported in this call%s", nm_fn_names[fn],
                 cls == MPI_ERR_UNSUPPORTED_OPERATION ? " yet (MPI-4 persistent and partitioned calls)" : "");
    NM_WARN(CALL, "%s", msg + 9);
    NM_COUNT_ROUTE(fn, NCCLMPI_ROUTE_ERROR);
    return nm_error_code(cls, msg);
}

}  // namespace

extern "C" int nm_reject_device(const nm_rbuf_t *b, int n)
{
    if (nm_cfg.DISABLE) return 0;  // the kill switch: every call to the real MPI, as it is
    if (!cuda_attached() && !nm_linkmap_refresh()) return 0;
    for (int i = 0; i < n; i++) {
        const void *p = b[i].p;
        if (b[i].count == 0 || p == MPI_IN_PLACE) continue;
        if (p == MPI_BOTTOM) {  // absolute addresses: the first byte the datatype places
            const DtypeInfo *d = b[i].type != MPI_DATATYPE_NULL ? dtype_info(b[i].type) : nullptr;
            if (!d || d->size == 0) continue;
            p = (const char *)MPI_BOTTOM + d->true_lb;
        }
        if (nm_mem_is_device(p)) return 1;
    }
    return 0;
}

extern "C" int nm_reject_comm(int fn, MPI_Comm comm)
{
    int code = reject_code(fn);
    PMPI_Comm_call_errhandler(comm != MPI_COMM_NULL ? comm : MPI_COMM_WORLD, code);
    return code;
}

extern "C" int nm_unsupported_comm(int fn, MPI_Comm comm)
{
    int code = reject_code(fn, MPI_ERR_UNSUPPORTED_OPERATION);
    PMPI_Comm_call_errhandler(comm != MPI_COMM_NULL ? comm : MPI_COMM_WORLD, code);
    return code;
}

extern "C" int nm_reject_win(int fn, MPI_Win win)
{
    int code = reject_code(fn);
    if (win != MPI_WIN_NULL) PMPI_Win_call_errhandler(win, code);
    else PMPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
    return code;
}

extern "C" int nm_reject_file(int fn, MPI_File fh)
{
    int code = reject_code(fn);
    PMPI_File_call_errhandler(fh, code);  // MPI_FILE_NULL: the default file error handler
    return code;
}

extern "C" int nm_count_error(int fn, MPI_Comm comm, MPI_Win win, MPI_File fh)
{
    int code = reject_code(fn, MPI_ERR_COUNT);
    if (fh != MPI_FILE_NULL) PMPI_File_call_errhandler(fh, code);
    else if (win != MPI_WIN_NULL) PMPI_Win_call_errhandler(win, code);
    else PMPI_Comm_call_errhandler(comm != MPI_COMM_NULL ? comm : MPI_COMM_WORLD, code);
    return code;
}
