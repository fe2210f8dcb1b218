/* ncclmpi Fortran tests: read ncclmpi's per-function counters from Fortran.
 *
 * The test programs are not linked with -lncclmpi (they get it by LD_PRELOAD, or not at all),
 * so the counters are looked up at run time with dlsym(RTLD_DEFAULT, "ncclmpi_get_stats").
 * Called from Fortran through bind(C) interfaces with NUL-terminated names ("Allreduce").
 *
 *   nmt_have_ncclmpi()         1 when libncclmpi is in the process, 0 otherwise
 *   nmt_fortran_calls(name)    entries into the Fortran entry points of MPI_<name>;
 *                              -1 when libncclmpi is absent, -2 when <name> is not intercepted
 *   nmt_c_calls(name)          the same for the C entry point MPI_<name>
 *   nmt_getpid()               this process's id (a name no other job's files have)
 */
#include <dlfcn.h>
#include <stddef.h>
#include <unistd.h>
#include "ncclmpi.h"

typedef int (*nmt_get_stats_fn)(const char *, ncclmpi_stats_t *);

static nmt_get_stats_fn nmt_lookup(void)
{
    static nmt_get_stats_fn fn;
    static int done;
    if (!done) {
        fn = (nmt_get_stats_fn)dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
        done = 1;
    }
    return fn;
}

int nmt_have_ncclmpi(void) { return nmt_lookup() != NULL; }

static long long nmt_get(const char *name, int fortran)
{
    nmt_get_stats_fn fn = nmt_lookup();
    ncclmpi_stats_t s;
    if (!fn) return -1;
    if (fn(name, &s) != 0) return -2;
    return (long long)(fortran ? s.fortran_calls : s.calls);
}

long long nmt_fortran_calls(const char *name) { return nmt_get(name, 1); }
long long nmt_c_calls(const char *name) { return nmt_get(name, 0); }

int nmt_getpid(void) { return (int)getpid(); }
