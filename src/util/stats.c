/* ncclmpi: counters and their report. */
#include "nm_build.h"
#include "util/stats.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

nm_stats_t nm_stats;

const char *const nm_fn_names[NM_FN_COUNT] = {
#define NM_FN_NAME(name, path, kind, flags) #name,
    NM_FN_TABLE(NM_FN_NAME)
#undef NM_FN_NAME
};

int nm_fn_lookup(const char *name)
{
    if (!name) return -1;
    if (!strncmp(name, "MPI_", 4)) name += 4;
    for (int i = 0; i < NM_FN_COUNT; i++)
        if (!strcmp(nm_fn_names[i], name)) return i;
    return -1;
}

__attribute__((visibility("default"))) int ncclmpi_get_stats(const char *mpi_function, ncclmpi_stats_t *s)
{
    int fn = nm_fn_lookup(mpi_function);
    if (fn < 0 || !s) return -1;
    memset(s, 0, sizeof(*s));
    s->calls = __atomic_load_n(&nm_stats.calls[fn], __ATOMIC_RELAXED);
    s->fortran_calls = __atomic_load_n(&nm_stats.fcalls[fn], __ATOMIC_RELAXED);
    uint64_t routed = 0;
    for (int r = NCCLMPI_ROUTE_NCCL; r < NCCLMPI_ROUTE_COUNT; r++) {
        s->route[r] = __atomic_load_n(&nm_stats.route[fn][r], __ATOMIC_RELAXED);
        routed += s->route[r];
    }
    /* Everything not routed elsewhere went to the real MPI: fast-path calls are not counted
     * per route, so host = entries - other routes (Fortran calls that took the C path are
     * counted once, as C calls). */
    uint64_t entries = s->calls + s->fortran_calls - __atomic_load_n(&nm_stats.fcalls_c[fn], __ATOMIC_RELAXED);
    s->route[NCCLMPI_ROUTE_HOST] = entries >= routed ? entries - routed : 0;
    return 0;
}

__attribute__((visibility("default"))) void ncclmpi_print_stats(void)
{
    int r = nm_log_rank();
    fprintf(stderr, "[ncclmpi r%d] %-22s %10s %10s %10s %10s %10s %10s\n", r, "function", "calls", "fortran", "host",
            "nccl", "staged", "error");
    for (int i = 0; i < NM_FN_COUNT; i++) {
        ncclmpi_stats_t s;
        ncclmpi_get_stats(nm_fn_names[i], &s);
        if (!s.calls && !s.fortran_calls) continue;
        fprintf(stderr, "[ncclmpi r%d] %-22s %10llu %10llu %10llu %10llu %10llu %10llu\n", r, nm_fn_names[i], s.calls,
                s.fortran_calls, s.route[NCCLMPI_ROUTE_HOST], s.route[NCCLMPI_ROUTE_NCCL],
                s.route[NCCLMPI_ROUTE_STAGED], s.route[NCCLMPI_ROUTE_ERROR]);
    }
}
