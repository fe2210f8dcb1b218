/* ncclmpi: the wait watchdog (watchdog.h). Each waiting thread owns a slot; the background
 * thread reads the slots and never writes them but for the "warned" generation. */
#include "util/watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "util/config.h"
#include "util/log.h"

enum { WD_SLOTS = 256 };  /* threads watched at once; later threads wait unwatched */

typedef struct {
    _Atomic(double) since;        /* 0: not waiting */
    _Atomic(unsigned long) gen;   /* bumped at each begin */
    _Atomic(unsigned long) warned;  /* the generation last warned about */
    _Atomic(const char *) call;
    _Atomic(const char *) where;
    atomic_int fatal;             /* inside a blocking call of the real MPI (watchdog.h) */
    atomic_int comm;              /* its communicator's id, or -1 */
    _Atomic(double) limit;        /* a fatal wait's own limit (nm_wd_begin_fatal_limit), 0: none */
} wd_slot_t;

static wd_slot_t slots[WD_SLOTS];
static atomic_int nslots;
static __thread int my_slot __attribute__((tls_model("initial-exec"))) = -1;  /* -2: no slot left for this thread */
static atomic_ulong nwarned;
/* the calling thread's wait, as its last begin named it (nm_wd_current; kept without a slot too) */
static __thread const char *cur_call __attribute__((tls_model("initial-exec")));
static __thread const char *cur_where __attribute__((tls_model("initial-exec")));

double nm_wd_fatal_after(void) { return nm_cfg.TIMEOUT > 0 ? 1.5 * (double)nm_cfg.TIMEOUT + 1.0 : 0.0; }

/* A fatal wait ran out: nothing can end the real MPI's call but the job's end. */
static void fatal_abort(const char *call, const char *where, int comm, double waited, int own)
{
    char c[32] = "";
    if (comm >= 0) snprintf(c, sizeof(c), " on comm%d", comm);
    if (own) {  /* this rank's own failure, its peers inside NCCL's waits (watchdog.h) */
        NM_ERROR(CALL, "MPI_%s%s: %s; its peers have not answered in %.0f s (NCCLMPI_CREATE_GRACE=%ld): they wait "
                 "inside NCCL, where nothing reaches them; aborting the job", call ? call : "?", c, where ? where : "",
                 waited, nm_cfg.CREATE_GRACE);
        PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_OTHER);
    }
    NM_ERROR(CALL, "MPI_%s%s has waited %.0f s %s (NCCLMPI_TIMEOUT=%ld), where ncclmpi cannot end the call: ranks "
             "may have passed different kinds of memory (see NCCLMPI_AGREE), or a rank is gone or not calling it; "
             "aborting the job", call ? call : "?", c, waited, where ? where : "", nm_cfg.TIMEOUT);
    PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_OTHER);
}

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stopping, running;
static pthread_t thr;

static void scan(double now)
{
    const int n = atomic_load(&nslots);
    for (int i = 0; i < n && i < WD_SLOTS; i++) {
        wd_slot_t *s = &slots[i];
        const unsigned long g = atomic_load(&s->gen);
        const double since = atomic_load(&s->since), lim = atomic_load(&s->limit);
        double fa = nm_wd_fatal_after();
        if (since <= 0) continue;
        const int own = lim > 0 && (fa <= 0 || lim < fa);
        if (own) fa = lim;
        const int fatal = atomic_load(&s->fatal) && fa > 0 && now - since >= fa;
        if (!fatal && (nm_cfg.WARN_AFTER <= 0 || now - since < (double)nm_cfg.WARN_AFTER || atomic_load(&s->warned) == g))
            continue;
        const char *call = atomic_load(&s->call), *where = atomic_load(&s->where);
        if (atomic_load(&s->gen) != g || atomic_load(&s->since) != since) continue;  /* it moved on */
        if (fatal) fatal_abort(call, where, atomic_load(&s->comm), now - since, own);
        atomic_store(&s->warned, g);
        atomic_fetch_add(&nwarned, 1);
        NM_WARN(CALL, "MPI_%s has waited %.0f s %s (NCCLMPI_WARN_AFTER=%ld): a rank that has not made the "
                "matching call, or that died, keeps it waiting, or ranks passed different kinds of memory to "
                "one collective (see NCCLMPI_AGREE)", call ? call : "?", now - since,
                where ? where : "", nm_cfg.WARN_AFTER);
    }
}

static void *run(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;  /* a scan a second: a warning comes at most a second late */
        pthread_cond_timedwait(&cv, &mu, &ts);
        if (stopping) break;
        pthread_mutex_unlock(&mu);
        scan(nm_now_s());
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void start(void)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 << 10);
    pthread_mutex_lock(&mu);
    running = !stopping && pthread_create(&thr, &a, run, NULL) == 0;
    pthread_mutex_unlock(&mu);
    pthread_attr_destroy(&a);
}

static void begin(const char *call, const char *where, int fatal, int comm, double limit)
{
    cur_call = call;
    cur_where = where;
    if (nm_cfg.WARN_AFTER <= 0 && (!fatal || (nm_cfg.TIMEOUT <= 0 && limit <= 0))) return;
    if (my_slot < 0) {
        if (my_slot == -2) return;
        const int i = atomic_fetch_add(&nslots, 1);
        if (i >= WD_SLOTS) {
            my_slot = -2;
            return;
        }
        my_slot = i;
    }
    pthread_once(&start_once, start);
    wd_slot_t *s = &slots[my_slot];
    atomic_store(&s->since, 0.0);
    atomic_fetch_add(&s->gen, 1);
    atomic_store(&s->call, call);
    atomic_store(&s->where, where);
    atomic_store(&s->fatal, fatal);
    atomic_store(&s->comm, comm);
    atomic_store(&s->limit, fatal ? limit : 0.0);
    atomic_store(&s->since, nm_now_s());
}

void nm_wd_begin(const char *call, const char *where) { begin(call, where, 0, -1, 0.0); }
void nm_wd_begin_fatal(const char *call, const char *where, int comm_id) { begin(call, where, 1, comm_id, 0.0); }
void nm_wd_begin_fatal_limit(const char *call, const char *where, int comm_id, double limit)
{
    begin(call, where, 1, comm_id, limit);
}

void nm_wd_end(void)
{
    cur_call = cur_where = NULL;
    if (my_slot >= 0) atomic_store(&slots[my_slot].since, 0.0);
}

void nm_wd_current(const char **call, const char **where)
{
    *call = cur_call;
    *where = cur_where;
}

void nm_wd_stop(void)
{
    pthread_mutex_lock(&mu);
    stopping = 1;
    const int was = running;
    running = 0;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    if (was) pthread_join(thr, NULL);
}

unsigned long nm_wd_warnings(void) { return atomic_load(&nwarned); }
