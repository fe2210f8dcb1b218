/* stage_profile.h: the sums bench/stage_profile.c keeps per NVTX range name, as
 * stage_profile_snapshot() returns them (bench/device_overhead --stages reads them). */
#ifndef NM_BENCH_STAGE_PROFILE_H
#define NM_BENCH_STAGE_PROFILE_H

enum { STAGE_PROFILE_MAX_ROWS = 64 };

struct stage_profile_row {
    const char *key;    /* the address the name came at (internal) */
    char name[48];      /* the range's name */
    long long count;    /* ranges closed */
    long long incl_ns;  /* their time, push to pop */
    long long self_ns;  /* less the ranges nested in them */
    long long children; /* ranges nested directly in them (each adds about probe_ns to self_ns) */
};

/* copies up to max rows into out and returns their number; probe (if not NULL) gets two costs in
 * ns: [0] what one empty range adds to the range holding it, [1] what an empty range measures
 * itself. A range's true self time is self_ns - count x probe[1] - children x (probe[0] - probe[1]). */
typedef int (*stage_profile_snapshot_fn)(struct stage_profile_row *out, int max, double probe[2]);

#endif
