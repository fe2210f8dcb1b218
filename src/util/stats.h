/* ncclmpi: per-function call and route counters. The fast path pays one increment. */
#ifndef NM_UTIL_STATS_H
#define NM_UTIL_STATS_H
#include <stdint.h>
#include "nm_fn.h"
#include "ncclmpi.h"
#ifdef __cplusplus
extern "C" {
#endif

/* every route, the one-shot route (outside ncclmpi_stats_t's fixed array) and the fused count included */
#define NM_ROUTES (NCCLMPI_ROUTE_FUSED + 1)

typedef struct nm_stats {
    uint64_t calls[NM_FN_COUNT];
    uint64_t fcalls[NM_FN_COUNT];  /* Fortran entries */
    uint64_t fcalls_c[NM_FN_COUNT]; /* Fortran entries that took the C path */
    uint64_t route[NM_FN_COUNT][NM_ROUTES]; /* slow-path decisions (host counted too) */
    uint64_t sides_made, sides_reused; /* communicators' device sides (NCCL communicators and
                                        * shared-GPU windows): made, taken over from a freed one */
    uint64_t fused_calls;              /* NCCL calls that fused operations shared (NCCLMPI_FUSE) */
} nm_stats_t;

extern nm_stats_t nm_stats;
extern const char *const nm_fn_names[NM_FN_COUNT];

/* Relaxed load + store: no locked instruction on the hot path; counts may lose increments
 * when threads race, which is documented. */
#define NM_STAT_INC(x) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)
#define NM_COUNT_CALL(fn) NM_STAT_INC(nm_stats.calls[fn])
#define NM_COUNT_FCALL(fn) NM_STAT_INC(nm_stats.fcalls[fn])
#define NM_COUNT_ROUTE(fn, r) NM_STAT_INC(nm_stats.route[fn][r])

int nm_fn_lookup(const char *name);

/* The NCCLMPI_STATS report, at MPI_Finalize while MPI still works (nm_before_finalize): the
 * summary (default) is a reduction over MPI_COMM_WORLD in which every rank takes part, printed by
 * rank 0; `rank` prints this rank's table (ncclmpi_print_stats); `file:PATH` writes it to a file. */
void nm_stats_finalize(void);

#ifdef __cplusplus
}
#endif
#endif
