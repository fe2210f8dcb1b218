/* Failure injection in the stand-ins (fake_cuda.c, fake_nccl.c; test/unit/fail_inject.sh):
 *   FAKE_FAIL=<call>:<world rank>:<nth>[,<call>:<world rank>:<nth>...]
 * makes the nth call (counted from 1, per name and process) of the stand-in entry point <call>
 * fail on the process of that MPI_COMM_WORLD rank, before it does anything; every other call
 * works. FAKE_FAIL_TRACE=1 prints each counted call ("fake_fail r<rank> <call> <n>") to stderr, so
 * that a test can see which nth call is the one it means; a call made to fail prints its line
 * ("... (fails)") with or without it. The rank is the launcher's
 * (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK): the stand-ins are called before MPI_Init too.
 * Included once by each stand-in library: each counts its own calls. */
#ifndef NM_TEST_FAKE_FAIL_H
#define NM_TEST_FAKE_FAIL_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FF_MAX = 32, FF_NAME = 40 };
static struct {
    char name[FF_NAME];
    unsigned long calls;       /* counted so far on this process */
    unsigned long fail_at[4];  /* the nth calls that fail here (0: none) */
} ff_tab[FF_MAX];
static int ff_n, ff_ready, ff_trace;
static pthread_mutex_t ff_mu = PTHREAD_MUTEX_INITIALIZER;

static int ff_rank(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (int i = 0; i < 3; i++) {
        const char *e = getenv(v[i]);
        if (e && *e) return atoi(e);
    }
    return -1;
}

static int ff_slot(const char *name)
{
    for (int i = 0; i < ff_n; i++)
        if (!strcmp(ff_tab[i].name, name)) return i;
    if (ff_n == FF_MAX) return -1;
    snprintf(ff_tab[ff_n].name, FF_NAME, "%s", name);
    return ff_n++;
}

static void ff_parse(void)
{
    const char *t = getenv("FAKE_FAIL_TRACE");
    ff_trace = t && *t == '1';
    const char *e = getenv("FAKE_FAIL");
    const int me = ff_rank();
    while (e && *e) {
        char name[FF_NAME];
        int rank = -1, used = 0;
        unsigned long nth = 0;
        if (sscanf(e, "%39[^:,]:%d:%lu%n", name, &rank, &nth, &used) != 3) {
            fprintf(stderr, "stand-in: FAKE_FAIL: cannot read \"%s\" (want <call>:<rank>:<nth>)\n", e);
            abort();
        }
        int s = rank == me && nth > 0 ? ff_slot(name) : -1;
        for (int k = 0; s >= 0 && k < 4; k++)
            if (!ff_tab[s].fail_at[k]) {
                ff_tab[s].fail_at[k] = nth;
                break;
            }
        e += used;
        if (*e == ',') e++;
    }
    ff_ready = 1;
}

/* 1 when this call of `name` is to fail (it counts the call) */
static int fake_fail(const char *name)
{
    pthread_mutex_lock(&ff_mu);
    if (!ff_ready) ff_parse();
    int s = ff_trace || ff_n ? ff_slot(name) : -1, fail = 0;
    if (s >= 0) {
        const unsigned long n = ++ff_tab[s].calls;
        for (int k = 0; k < 4; k++) fail |= ff_tab[s].fail_at[k] == n;
        if (ff_trace || fail) fprintf(stderr, "fake_fail r%d %s %lu%s\n", ff_rank(), name, n, fail ? " (fails)" : "");
    }
    pthread_mutex_unlock(&ff_mu);
    return fail;
}
#endif
