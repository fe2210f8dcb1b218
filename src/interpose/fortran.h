/* ncclmpi: Fortran sentinels and handle conversion for the generated Fortran delegates. */
#ifndef NM_INTERPOSE_FORTRAN_H
#define NM_INTERPOSE_FORTRAN_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Fortran sentinel common blocks (Open MPI names; weak so a C-only program loads us fine). */
extern int mpi_fortran_in_place_ NM_WEAK;
extern int mpi_fortran_bottom_ NM_WEAK;
extern int mpi_fortran_status_ignore_ NM_WEAK;
extern int mpi_fortran_statuses_ignore_ NM_WEAK;

static inline void *nm_f2c_buf(void *p)
{
    if (p == (void *)&mpi_fortran_in_place_) return MPI_IN_PLACE;
    if (p == (void *)&mpi_fortran_bottom_) return MPI_BOTTOM;
    return p;
}
static inline int nm_f_status_ignored(MPI_Fint *s) { return (void *)s == (void *)&mpi_fortran_status_ignore_; }
static inline int nm_f_logical(int c) { return c ? 1 : 0; /* gfortran .true. */ }

int nm_f_maybe_device(void *a, void *b);
MPI_Datatype *nm_f2c_types(const MPI_Fint *f, MPI_Comm comm);
/* one per neighbour of comm's topology: out-neighbours when sending, else in-neighbours */
MPI_Datatype *nm_f2c_neighbor_types(const MPI_Fint *f, MPI_Comm comm, int sending);
MPI_Request *nm_f2c_reqs(const MPI_Fint *f, int n);
void nm_c2f_reqs(MPI_Request *c, MPI_Fint *f, int n);
MPI_Status *nm_f_statuses_alloc(MPI_Fint *f, int n);
void nm_c2f_statuses(MPI_Status *c, MPI_Fint *f, int n);
void nm_f_indices_c2f(MPI_Fint *idx, int outcount);
void nm_f_missing(const char *name);

/* Host path of a Fortran delegate: Open MPI's own Fortran binding (pmpi_x_), unchanged. */
#define NM_F_FORWARD(pfn, name, ...)                                                          \
    do {                                                                                      \
        if (NM_UNLIKELY(!(pfn))) nm_f_missing(name);                                          \
        pfn(__VA_ARGS__);                                                                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
