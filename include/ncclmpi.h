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
    NCCLMPI_ROUTE_IPC = 5,     /* through CUDA IPC: one-sided calls on a window in device memory,
                                  and collectives of ranks that share a GPU; read with
                                  ncclmpi_get_route_calls */
    NCCLMPI_ROUTE_FUSED = 6    /* not a route of its own: calls on the NCCL route that shared one
                                  NCCL call with others of their group (NCCLMPI_FUSE), counted
                                  at their launch; read with ncclmpi_get_route_calls */
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
 * NCCLMPI_ROUTE_ONESHOT, NCCLMPI_ROUTE_IPC and NCCLMPI_ROUTE_FUSED. Returns 0, or -1 for an unknown name or route. */
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

/* ---- Stream-ordered calls: MPICH's MPIX_Stream extension ------------------------------------
 * Declared when <mpi.h> was included first and does not declare them itself. A communicator made
 * by MPIX_Stream_comm_create from a stream that wraps a cudaStream_t takes MPIX_*_enqueue calls:
 * each runs after the work queued on that stream before it, and the stream's later work sees its
 * result. MPIX_Allreduce_enqueue on device buffers that NCCL (or ncclmpi's one-shot kernels) can
 * reduce is launched on the stream and the call returns at once; every other enqueued call waits
 * for the stream's work so far, then runs as its blocking form (MPIX_Isend_enqueue as MPI_Isend)
 * and has completed (or, for the I-forms, started) when it returns. doc/design.md,
 * "Stream-ordered calls", has the details.
 *
 *     MPI_Info info;
 *     MPI_Info_create(&info);
 *     MPI_Info_set(info, "type", "cudaStream_t");
 *     MPIX_Info_set_hex(info, "value", &stream, sizeof(stream));
 *     MPIX_Stream s;
 *     MPIX_Stream_create(info, &s);
 *     MPI_Comm scomm;
 *     MPIX_Stream_comm_create(MPI_COMM_WORLD, s, &scomm);
 *     kernel<<<g, b, 0, stream>>>(grad);
 *     MPIX_Allreduce_enqueue(MPI_IN_PLACE, grad, n, MPI_FLOAT, MPI_SUM, scomm);
 *     next_kernel<<<g, b, 0, stream>>>(grad);
 */
#if defined(MPI_VERSION) && !defined(MPIX_STREAM_NULL)
typedef struct ncclmpi_stream *MPIX_Stream;
#define MPIX_STREAM_NULL ((MPIX_Stream)0)
int MPIX_Info_set_hex(MPI_Info info, const char *key, const void *value, int value_size);
int MPIX_Stream_create(MPI_Info info, MPIX_Stream *stream);
int MPIX_Stream_free(MPIX_Stream *stream);
int MPIX_Stream_comm_create(MPI_Comm comm, MPIX_Stream stream, MPI_Comm *newcomm);
int MPIX_Stream_comm_create_multiplex(MPI_Comm comm, int count, MPIX_Stream array_of_streams[], MPI_Comm *newcomm);
int MPIX_Comm_get_stream(MPI_Comm comm, int idx, MPIX_Stream *stream);
int MPIX_Stream_progress(MPIX_Stream stream);
int MPIX_Send_enqueue(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPIX_Recv_enqueue(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                      MPI_Status *status);
int MPIX_Isend_enqueue(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                       MPI_Request *request);
int MPIX_Irecv_enqueue(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                       MPI_Request *request);
int MPIX_Wait_enqueue(MPI_Request *request, MPI_Status *status);
int MPIX_Waitall_enqueue(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]);
int MPIX_Allreduce_enqueue(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                           MPI_Comm comm);
#endif

#ifdef __cplusplus
}
#endif
#endif
