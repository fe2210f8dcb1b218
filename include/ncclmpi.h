/* ncclmpi public extensions.
 *
 * libncclmpi.so interposes the MPI API: device-buffer calls go to NCCL, host-buffer calls to
 * the real MPI. These functions let a program (or a test) ask what the library did. Programs
 * that do not link -lncclmpi can look them up with dlsym(RTLD_DEFAULT, "ncclmpi_get_stats").
 */
#ifndef NCCLMPI_H
#define NCCLMPI_H

#ifdef __cplusplus
extern "C" {
#endif

#define NCCLMPI_VERSION_MAJOR 0
#define NCCLMPI_VERSION_MINOR 1
#define NCCLMPI_VERSION_PATCH 0

typedef enum {
    NCCLMPI_ROUTE_HOST = 0,   /* the real MPI on the caller's buffers */
    NCCLMPI_ROUTE_NCCL = 1,   /* NCCL on device buffers */
    NCCLMPI_ROUTE_STAGED = 2, /* device buffers copied to host, the real MPI, copied back */
    NCCLMPI_ROUTE_ERROR = 3,  /* rejected with an MPI error */
    NCCLMPI_ROUTE_COUNT = 4,  /* the routes ncclmpi_stats_t.route holds (its layout is fixed) */
    NCCLMPI_ROUTE_ONESHOT = 4, /* one kernel per rank over NVLink (small device reductions); read
                                  with ncclmpi_get_route_calls */
    NCCLMPI_ROUTE_IPC = 5      /* through CUDA IPC: one-sided calls on a window in device memory,
                                  and collectives of ranks that share a GPU; read with
                                  ncclmpi_get_route_calls */
} ncclmpi_route_t;

typedef struct ncclmpi_stats {
    unsigned long long calls;         /* entries into the C entry point MPI_<name> */
    unsigned long long fortran_calls; /* entries into the Fortran entry points of <name> */
    unsigned long long route[NCCLMPI_ROUTE_COUNT];
} ncclmpi_stats_t;

/* Version string, e.g. "0.1.0 (NCCL 2.28.9 headers)". */
const char *ncclmpi_version(void);

/* Counters for one intercepted function, named without prefix ("Allreduce"). Returns 0, or -1
 * when the name is not intercepted. Counts are per process and approximate under concurrent
 * calls from several threads (they are not atomic read-modify-writes). */
int ncclmpi_get_stats(const char *mpi_function, ncclmpi_stats_t *stats);

/* Calls of one intercepted function (named without prefix) that took `route`, any route including
 * NCCLMPI_ROUTE_ONESHOT and NCCLMPI_ROUTE_IPC. Returns 0, or -1 for an unknown name or route. */
int ncclmpi_get_route_calls(const char *mpi_function, int route, unsigned long long *calls);

/* Print this process's per-function route table to stderr, in one write (what NCCLMPI_STATS=rank
 * prints at finalize; NCCLMPI_STATS=1 prints a summary over all ranks from rank 0 instead). */
void ncclmpi_print_stats(void);

/* 1 when NCCL has been loaded into this process, 0 otherwise. */
int ncclmpi_nccl_loaded(void);

/* Explicit groups. Nonblocking device collectives that the calling thread issues between
 * ncclmpi_group_begin() and ncclmpi_group_end() are launched together, as one NCCL group per
 * communicator, at ncclmpi_group_end(). Like ncclGroupStart/ncclGroupEnd, every rank must group
 * the same operations; a request of the group completes only after ncclmpi_group_end() (waiting on
 * it inside the group fails with MPI_ERR_REQUEST), and a blocking collective inside a group ends
 * the group there. Groups nest; only the outermost end launches. As NCCL orders a group's work at
 * ncclGroupEnd, the group's operations follow the application's work on the default stream as it
 * stands at ncclmpi_group_end() (outside a group, each follows it as it stands at its call).
 * Return MPI_SUCCESS or an MPI error code. Host-buffer calls inside a group are unaffected.
 *
 *     ncclmpi_group_begin();
 *     for (int i = 0; i < nbuckets; i++)
 *         MPI_Iallreduce(MPI_IN_PLACE, grad[i], len[i], MPI_FLOAT, MPI_SUM, comm, &req[i]);
 *     ncclmpi_group_end();
 *     MPI_Waitall(nbuckets, req, MPI_STATUSES_IGNORE);
 */
int ncclmpi_group_begin(void);
int ncclmpi_group_end(void);

#ifdef __cplusplus
}
#endif
#endif
