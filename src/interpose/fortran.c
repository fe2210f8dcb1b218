/* ncclmpi: helpers of the Fortran delegates (array conversions, sentinels). Only the C path of
 * a Fortran call (device buffers, or ncclmpi requests outstanding) uses them. */
#include "interpose/interpose.h"
#include "interpose/fortran.h"
#include "core/cuda/memkind.h"
#include "util/config.h"

#include <stdio.h>
#include <stdlib.h>

/* 1 when the C path must see the call: a device buffer, MPI_BOTTOM (absolute addresses may
 * point into device memory), or NCCLMPI_AGREE (every rank votes, host ranks too). */
extern int nm_pending_comms;

int nm_f_maybe_device(void *a, void *b)
{
    if (nm_cfg.AGREE || nm_envelopes_configured || __atomic_load_n(&nm_pending_comms, __ATOMIC_RELAXED)) return 1;
    void *ca = nm_f2c_buf(a), *cb = b ? nm_f2c_buf(b) : NULL;
    if (ca == MPI_BOTTOM || (b && cb == MPI_BOTTOM)) return 1;
    return nm_mem_is_device(ca) || nm_mem_is_device(cb);
}

static MPI_Datatype *f2c_types_n(const MPI_Fint *f, int n)
{
    MPI_Datatype *c = (MPI_Datatype *)malloc(sizeof(MPI_Datatype) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) c[i] = PMPI_Type_f2c(f[i]);
    return c;
}

MPI_Datatype *nm_f2c_types(const MPI_Fint *f, MPI_Comm comm)
{
    int n = 0, inter = 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) PMPI_Comm_remote_size(comm, &n); else PMPI_Comm_size(comm, &n);
    return f2c_types_n(f, n);
}

MPI_Datatype *nm_f2c_neighbor_types(const MPI_Fint *f, MPI_Comm comm, int sending)
{
    int nin = 0, nout = 0;
    if (!nm_neighbor_degrees(comm, &nin, &nout)) nin = nout = 0;  /* the real MPI reports it */
    return f2c_types_n(f, sending ? nout : nin);
}

MPI_Request *nm_f2c_reqs(const MPI_Fint *f, int n)
{
    MPI_Request *c = (MPI_Request *)malloc(sizeof(MPI_Request) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) c[i] = PMPI_Request_f2c(f[i]);
    return c;
}

void nm_c2f_reqs(MPI_Request *c, MPI_Fint *f, int n)
{
    for (int i = 0; i < n; i++) f[i] = PMPI_Request_c2f(c[i]);
    free(c);
}

MPI_Status *nm_f_statuses_alloc(MPI_Fint *f, int n)
{
    if ((void *)f == (void *)&mpi_fortran_statuses_ignore_) return MPI_STATUSES_IGNORE;
    return (MPI_Status *)calloc((size_t)(n > 0 ? n : 1), sizeof(MPI_Status));
}

void nm_c2f_statuses(MPI_Status *c, MPI_Fint *f, int n)
{
    if (c == MPI_STATUSES_IGNORE) return;
    int fsize = sizeof(MPI_Status) / sizeof(int); /* MPI_STATUS_SIZE in Open MPI */
    for (int i = 0; i < n; i++) PMPI_Status_c2f(&c[i], f + (size_t)i * fsize);
    free(c);
}

void nm_f_indices_c2f(MPI_Fint *idx, int outcount)
{
    if (outcount == MPI_UNDEFINED) return;
    for (int i = 0; i < outcount; i++) idx[i] += 1;
}

void nm_f_missing(const char *name)
{
    fprintf(stderr, "[ncclmpi] ERROR: Fortran MPI_%s called but the MPI Fortran library (pmpi_*_) is not loaded\n", name);
    abort();
}
