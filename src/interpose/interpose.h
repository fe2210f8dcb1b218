/* ncclmpi: what the generated wrappers (wrap_c.c, wrap_f.c) see.
 *
 * The fast path of a host-buffer call is: count the call, check that no CUDA driver is in the
 * process (two loads), jump to PMPI. Everything else is behind nm_enter(): a DATA wrapper
 * describes its call and submits it, nothing more.
 */
#ifndef NM_INTERPOSE_H
#define NM_INTERPOSE_H
#include <link.h>
#include <mpi.h>
#include <stdlib.h>
#include "nm_build.h"  /* (NM_PREADY_LIST_CONST: a type in nm_impl.h) */
#include "nm_fn.h"
#include "nm_impl.h"
#include "route/nm_op.h"
#include "util/stats.h"
#ifdef __cplusplus
extern "C" {
#endif

#define NM_LIKELY(x) __builtin_expect(!!(x), 1)
#define NM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NM_EXPORT __attribute__((visibility("default")))
#define NM_ALIAS(target) __attribute__((alias(#target), visibility("default")))
#define NM_WEAK __attribute__((weak))
#define NM_NOINLINE __attribute__((noinline))

/* State read by every wrapper. `slow` is set once the CUDA driver is in the process (or when a
 * setting needs every call described); `tail` is the last loaded object we have looked at: a
 * newly loaded library shows up as tail->l_next != NULL, without a call into the loader. */
typedef struct nm_hot {
    int slow;
    int pending; /* outstanding ncclmpi tasks behind user requests, and staged persistent requests */
    int queued;  /* nonblocking device operations queued for coalescing, not launched yet */
    struct link_map *volatile tail;
} nm_hot_t;
extern nm_hot_t nm_hot;
/* NCCLMPI_P2P_ENVELOPE is on: every receive goes through ncclmpi (it may get an envelope) */
extern int nm_envelopes_configured;

static inline int nm_host_fast(void) { return !nm_hot.slow && nm_hot.tail->l_next == NULL; }
/* NCCLMPI_LOG=TRACE sets this bit in nm_hot.queued (and nm_hot.slow) at load, so that every
 * wrapper takes its slow branch, where it traces the call: no test on the fast path */
#define NM_TRACE_BIT (1 << 30)
void nm_trace_call_slow(int fn);
static inline void nm_trace_call(int fn)
{
    if (__builtin_expect((__atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED) & NM_TRACE_BIT) != 0, 0)) nm_trace_call_slow(fn);
}
static inline int nm_tasks_pending(void) { return __atomic_load_n(&nm_hot.pending, __ATOMIC_RELAXED) != 0; }
/* ncclmpi has work that an MPI call must move along: tasks to complete or operations to launch */
static inline int nm_work_pending(void)
{
    return (__atomic_load_n(&nm_hot.pending, __ATOMIC_RELAXED) | __atomic_load_n(&nm_hot.queued, __ATOMIC_RELAXED)) != 0;
}

/* The real MPI call of a DATA row made from its descriptor alone (generated into wrap_c.c,
 * indexed by nm_fn_t; NULL for the other paths): what the core calls when it runs a call itself
 * on other buffers (staged host shadows), another op, or a status it reads. */
typedef int (*nm_real_fn_t)(const nm_op_t *o);
extern const nm_real_fn_t nm_real_fns[NM_FN_COUNT];

/* ---- implemented in src/core (extern "C") ---- */
/* Classify, route and run a described call. Returns 1 when ncclmpi ran it (its return code in
 * *rc; the NCCL, staged and envelope paths, and host calls the core changed), 0 when the wrapper
 * calls the real MPI with the application's own arguments. */
int nm_enter(nm_op_t *o, int *rc);

void nm_after_init(void);
void nm_before_finalize(void);
void nm_comm_created(MPI_Comm parent, MPI_Comm newcomm);
/* A blocking or otherwise synchronizing call on comm (MPI_COMM_NULL: none) is about to enter the
 * real MPI: launch what is queued; a blocking collective may create comm's pending NCCL
 * communicator (every rank is in it). Called only when nm_hot.slow. */
void nm_sync(int fn, MPI_Comm comm, int blocking_collective);
/* Launch queued operations (any call that may wait must not leave them queued). */
void nm_flush(void);
/* the same, from the wrapper of MPI function fn (traced under NCCLMPI_LOG=TRACE) */
void nm_flush_fn(int fn);

/* REJECT rows (src/core/reject.cc): calls whose buffers ncclmpi does not run on device memory.
 * One buffer: pointer, element count (0: not significant; -1: not known here, significant),
 * datatype (MPI_DATATYPE_NULL: the count is in bytes). */
typedef struct nm_rbuf {
    const void *p;
    long long count;
    MPI_Datatype type;
} nm_rbuf_t;
/* 1 when one of the n buffers is device memory (MPI_BOTTOM: at the datatype's true lower
 * bound, host without a datatype). 0 without a CUDA driver or with NCCLMPI_DISABLE. */
int nm_reject_device(const nm_rbuf_t *b, int n);
/* Raise MPI_ERR_BUFFER, "ncclmpi: MPI_<fn>: device buffers are not supported in this call",
 * through the error handler of the call's object (MPI_COMM_NULL: MPI_COMM_WORLD's) and return
 * the error code. */
int nm_reject_comm(int fn, MPI_Comm comm);
/* like nm_reject_comm, with MPI_ERR_UNSUPPORTED_OPERATION (the PERS REJECT rows: MPI-4 calls with no
 * device route yet) */
int nm_unsupported_comm(int fn, MPI_Comm comm);
int nm_reject_win(int fn, MPI_Win win);
int nm_reject_file(int fn, MPI_File fh);
/* LARGE rows (MPI-4's MPI_<Name>_c): a count fits an int (0..INT_MAX) and the call is its int
 * form's; nm_count_error raises MPI_ERR_COUNT, "ncclmpi: MPI_<fn>: a count above INT_MAX on device
 * buffers is not supported yet", through the error handler of fh, else win, else comm (all null:
 * MPI_COMM_WORLD's), and returns the error code. */
#define NM_FITS_INT(x) ((unsigned long long)(long long)(x) <= 0x7fffffffULL)
int nm_count_error(int fn, MPI_Comm comm, MPI_Win win, MPI_File fh);

/* RMA and WIN rows (src/core/tl/rma/window.cc): one-sided communication on windows with device
 * memory, and device buffers with windows in host memory. nm_win_state: NM_WIN_ON once ncclmpi is
 * initialised (MPI_Win_create goes through the core), | NM_WIN_TRACKED once the core keeps a
 * window's record (one with device memory, or a host window a device buffer met; sticky): from
 * then on every one-sided call and the synchronizations go through the core. */
enum { NM_WIN_ON = 1, NM_WIN_TRACKED = 2 };
extern int nm_win_state;
/* A one-sided data call: origin (obuf: Put/Accumulate/...; rbuf: a Get's origin, the result of
 * the fetching calls), compare buffer, target; counts default to 1 (Fetch_and_op,
 * Compare_and_swap: one element of their datatype) */
typedef struct nm_rma {
    int fn;
    const void *obuf;
    long long ocount;
    MPI_Datatype otype;
    void *rbuf;
    long long rcount;
    MPI_Datatype rtype;
    const void *cbuf;
    int trank;
    MPI_Aint tdisp;
    long long tcount;
    MPI_Datatype ttype;
    MPI_Op op;
    MPI_Win win;
    MPI_Request *req;
} nm_rma_t;
static inline void nm_rma_init(nm_rma_t *a, int fn)
{
    a->fn = fn;
    a->obuf = a->rbuf = NULL;
    a->cbuf = NULL;
    a->ocount = a->rcount = a->tcount = 1;
    a->otype = a->rtype = a->ttype = MPI_DATATYPE_NULL;
    a->trank = MPI_PROC_NULL;
    a->tdisp = 0;
    a->op = MPI_OP_NULL;
    a->win = MPI_WIN_NULL;
    a->req = NULL;
}
/* 1 when the core made the call (its target's window memory is device memory; *rc its result),
 * 0 when the wrapper goes on as a REJECT row */
int nm_rma(const nm_rma_t *a, int *rc);
/* Fortran's MPI_WIN_GET_ATTR: the predefined window attributes go through the C call; the value
 * of one from the reference the C call gives */
int nm_win_attr_predefined(int keyval);
MPI_Aint nm_win_attr_f(int keyval, void *c_value);

/* STAGE rows (src/core/tl/staged/local.cc): local calls (packing, MPI_Reduce_local, MPI-IO data
 * calls) whose device buffers go to the real MPI as host shadows. One buffer: as nm_rbuf_t, and
 * whether the call writes it (1: copied in and back; 0: only read, copied in). */
typedef struct nm_sbuf {
    const void *p;
    long long count;
    MPI_Datatype type;
    int written;  /* 0: only read; 1: read and written; 2: written from its start, as much as the
                     status counts (a read) */
} nm_sbuf_t;
/* how: a split collective's begin or end; NM_STAGE_COUNTS: the status the real call fills (or the
 * request's) reaches the core, so a read's contiguous buffer gets back only what was read;
 * NM_STAGE_WAITS: a blocking collective call, which waits in the real MPI for the other ranks
 * (watched from nm_stage_local to nm_stage_local_done, as blocking staged calls are) */
enum { NM_STAGE_BEGIN = 1, NM_STAGE_END = 2, NM_STAGE_COUNTS = 4, NM_STAGE_WAITS = 8 };
enum { NM_STAGE_HOST = 0, NM_STAGE_STAGED = 1, NM_STAGE_FAILED = 2 };
/* Before the real call of MPI function fn: NM_STAGE_HOST (no device buffer: the real MPI as it
 * is), NM_STAGE_STAGED (sh[i]: what to pass for b[i], its host shadow where it is device memory;
 * *stp: the status to pass, one of the core's where it was MPI_STATUS_IGNORE; then the real call,
 * then nm_stage_local_done with *tok), or NM_STAGE_FAILED (*rc: the error, raised through the
 * handler of fh, else comm, else MPI_COMM_WORLD). An _end (NM_STAGE_END) finds the shadow its
 * _begin staged on the same file. stp: null for a call without a status. */
int nm_stage_local(int fn, const nm_sbuf_t *b, int n, int how, MPI_File fh, MPI_Comm comm, void **sh, void **tok,
                   MPI_Status **stp, int *rc);
/* After the real call (rc its result, status the one it filled or null): the copies back (req
 * null) or, for a nonblocking call, *req replaced by ncclmpi's request that copies back when the
 * real one completes; a _begin keeps the shadows for its _end. Returns the call's result. */
int nm_stage_local_done(int fn, void *tok, int rc, MPI_Status *status, MPI_Request *req, MPI_File fh, MPI_Comm comm);

/* Tasks behind user requests (generalized requests completed by ncclmpi). */
void nm_progress(void);
void nm_progress_fn(int fn);  /* from the wrapper of MPI function fn (traced) */
int nm_tasks_owns(int n, const MPI_Request *reqs);
/* PROBE rows (src/core/tl/p2p/env_probe.cc): 1 when the hook made the call (*rc its result) */
int nm_probe_probe(int source, int tag, MPI_Comm comm, MPI_Status *status, int *rc);
int nm_probe_iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status, int *rc);
int nm_probe_mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status, int *rc);
int nm_probe_improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status, int *rc);
/* The in- and out-degree of comm's topology (neighbourhood collectives); 0 without one. */
int nm_neighbor_degrees(MPI_Comm comm, int *nin, int *nout);
/* PERSIST rows' hooks (nm_pers_<name>) and PART rows' calls (nm_part_<name>): nm_impl.h */
/* ncclmpi_group_begin / ncclmpi_group_end (include/ncclmpi.h) */
int nm_group_begin(void);
int nm_group_end(void);
int nm_wait_wait(MPI_Request *request, MPI_Status *status);
int nm_wait_waitall(int count, MPI_Request reqs[], MPI_Status *statuses);
int nm_wait_waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status);
int nm_wait_waitsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]);
int nm_wait_test(MPI_Request *request, int *flag, MPI_Status *status);
int nm_wait_testall(int count, MPI_Request reqs[], int *flag, MPI_Status *statuses);
int nm_wait_testany(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status);
int nm_wait_testsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]);

#ifdef __cplusplus
}
#endif
#endif
