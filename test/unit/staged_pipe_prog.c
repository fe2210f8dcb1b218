/* staged_pipe_prog: the staged route's pipelined collectives (src/core/tl/staged/pipeline.cc) on
 * device buffers of the stand-in CUDA driver (test/unit/fake_cuda.c; its device memory is host
 * memory), run by test/unit/staged_pipe.sh with NCCLMPI_FORCE_STAGED=1. Every result is compared
 * with the real MPI's own call (PMPI_) on host copies of the same inputs, into poisoned buffers.
 *  - a user-defined op on MPI_Type_contiguous(3, MPI_DOUBLE), 12 MB: the op must get that datatype
 *    and whole elements (a chunk of the basic type cut elements in three), Allreduce and Reduce;
 *  - MPI_Bcast of 13 MB whose root names it as 1.1 M blocks of doubles (more runs than the staged
 *    path's layouts list: it packs through the real MPI) and the others as doubles;
 *  - host memory running out on the last rank only (RLIMIT_AS just above what it maps, with
 *    NCCLMPI_STAGE_POOL=0 so that nothing is cached), for Allreduce (dense chunks) and Bcast of a
 *    vector (packed), then the stand-in's copies failing on that rank: every rank returns one
 *    error class (no rank hangs, crashes or succeeds with data it never got), and the next call
 *    on the same communicator works. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <string.h>
#include <sys/resource.h>

#include "stand_in.h"

enum { BIG = 24 << 20, NBUF = 2 };

static int rank, size, failures;
static CUdeviceptr dbuf[NBUF];
static MPI_Datatype trip; /* contiguous(3, MPI_DOUBLE) */
static long wrong_type;   /* calls of the op with another datatype */
static double *want;      /* a Bcast's expected doubles (allocated before any cap) */

#define FAIL(...)                                                  \
    do {                                                           \
        printf("staged_pipe_prog: [rank %d] FAIL ", rank);         \
        printf(__VA_ARGS__);                                       \
        printf("\n");                                              \
        failures++;                                                \
    } while (0)

/* per element of trip: a sum, a max and a sum of squares' roots' stand-in (a*b+1, wrapped):
 * three different rules, so an element cut in parts or shifted gives other numbers */
static void trip_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (*dt != trip) {
        wrong_type++;
        return;
    }
    const double *a = in;
    double *b = inout;
    for (long i = 0; i < *len; i++) {
        b[3 * i] += a[3 * i];
        b[3 * i + 1] = a[3 * i + 1] > b[3 * i + 1] ? a[3 * i + 1] : b[3 * i + 1];
        b[3 * i + 2] = (double)(((long)(a[3 * i + 2] * b[3 * i + 2]) + 1) % 1000003);
    }
}

static void fill(double *p, size_t n, int salt)
{
    for (size_t i = 0; i < n; i++) p[i] = (double)((i * 7 + (size_t)salt * 131) % 1000) + 1;
}

/* (4c) Allreduce and Reduce of 12 MB of trip with trip_op, against the real MPI on host copies */
static void user_op_on_derived(MPI_Comm comm)
{
    MPI_Op op;
    MPI_Op_create(trip_op, 1, &op);
    const int count = 12000000 / 24;
    const size_t n = (size_t)count * 3, bytes = n * sizeof(double);
    double *ds = (double *)(uintptr_t)dbuf[0], *dr = (double *)(uintptr_t)dbuf[1];
    double *hs = malloc(bytes), *hr = malloc(bytes + 64);
    for (int root = -1; root < size; root += size) { /* -1: Allreduce; 0 .. : Reduce at root */
        fill(hs, n, rank);
        memcpy(ds, hs, bytes);
        memset(hr, 0x5a, bytes + 64);
        memset(dr, 0x5a, bytes + 64);
        wrong_type = 0;
        int want = root < 0 ? PMPI_Allreduce(hs, hr, count, trip, op, comm) : PMPI_Reduce(hs, hr, count, trip, op, root, comm);
        long pmpi_wrong = wrong_type;
        int got = root < 0 ? MPI_Allreduce(ds, dr, count, trip, op, comm) : MPI_Reduce(ds, dr, count, trip, op, root, comm);
        const char *what = root < 0 ? "MPI_Allreduce" : "MPI_Reduce";
        if (pmpi_wrong) FAIL("the real MPI called the op with another datatype (%ld times)", pmpi_wrong);
        if (wrong_type > pmpi_wrong) FAIL("%s: the user op got another datatype than the caller's (%ld calls)", what, wrong_type - pmpi_wrong);
        if (want != got) FAIL("%s: rc %d, the real MPI's %d", what, got, want);
        if (memcmp(hr, dr, bytes + 64)) {
            size_t i = 0;
            while (i < n && hr[i] == dr[i]) i++;
            FAIL("%s of contiguous(3, MPI_DOUBLE) with a user op: element %zu (double %zu) is %g, the real MPI's %g",
                 what, i / 3, i, i < n ? dr[i] : 0, i < n ? hr[i] : 0);
        }
    }
    MPI_Op_free(&op);
    free(hs);
    free(hr);
}

/* Bcast of nd doubles from root 0, which names them through `rtype` (count 1: the doubles at
 * disp[i]) or as doubles; the others as doubles. Returns the call's rc; *ok: every rank's doubles
 * are the root's */
static int *disp; /* (allocated before any cap) */
static int bcast_check(MPI_Comm comm, MPI_Datatype rtype, size_t nd, int *ok)
{
    double *d = (double *)(uintptr_t)dbuf[0];
    const int typed = rank == 0 && rtype != MPI_DATATYPE_NULL;
    const size_t span = typed ? (size_t)disp[nd - 1] + 1 : nd;
    fill(want, nd, 99);
    for (size_t i = 0; i < span; i++) d[i] = -1;
    if (rank == 0)
        for (size_t i = 0; i < nd; i++) d[typed ? (size_t)disp[i] : i] = want[i];
    const int rc = typed ? MPI_Bcast(d, 1, rtype, 0, comm) : MPI_Bcast(d, (int)nd, MPI_DOUBLE, 0, comm);
    *ok = 1;
    for (size_t i = 0; i < nd && *ok; i++) *ok = d[typed ? (size_t)disp[i] : i] == want[i];
    return rc;
}

/* nd doubles: every other one (a vector: one layout run), or (irregular) in blocks of 1 and 2
 * doubles by turns with a double between blocks (no two neighbouring blocks alike: a layout run
 * per block, nd x 2/3 of them); disp[i]: where double i lies */
static MPI_Datatype strided(size_t nd, int irregular)
{
    MPI_Datatype v;
    if (!irregular) {
        for (size_t i = 0; i < nd; i++) disp[i] = (int)(2 * i);
        MPI_Type_vector((int)nd, 1, 2, MPI_DOUBLE, &v);
    } else {
        int *len = malloc(nd * sizeof(int)), *at = malloc(nd * sizeof(int)), nb = 0, pos = 0;
        for (size_t i = 0; i < nd; nb++) {
            len[nb] = nb % 2 ? 2 : 1;
            if (i + (size_t)len[nb] > nd) len[nb] = 1;
            at[nb] = pos;
            for (int k = 0; k < len[nb]; k++) disp[i++] = pos++;
            pos++;
        }
        MPI_Type_indexed(nb, len, at, MPI_DOUBLE, &v);
        free(len);
        free(at);
    }
    MPI_Type_commit(&v);
    return v;
}

/* a Bcast whose root's datatype has 1.1 M runs (more than the staged path's layouts list) */
static void many_runs(MPI_Comm comm)
{
    const size_t nd = 1650000;
    MPI_Datatype v = strided(nd, 1);
    int ok = 0;
    const int rc = bcast_check(comm, v, nd, &ok);
    if (rc != MPI_SUCCESS || !ok) FAIL("MPI_Bcast from %zu doubles in 1.1 M blocks: rc %d, data %s", nd, rc, ok ? "right" : "wrong");
    MPI_Type_free(&v);
}

/* every rank's rc has one error class, not MPI_SUCCESS */
static void same_error(MPI_Comm comm, const char *what, int rc, int want_class)
{
    int cls = MPI_SUCCESS, mn = 0, mx = 0;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    PMPI_Allreduce(&cls, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(&cls, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (mn != mx || cls == MPI_SUCCESS || (want_class >= 0 && cls != want_class))
        FAIL("%s with a failure on rank %d only: error class %d here, from %d to %d over the ranks (want %d everywhere)",
             what, size - 1, cls, mn, mx, want_class);
    (void)comm;
}

static long vm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* host memory runs out on the last rank only (its address space capped a little above what it
 * maps now): no rank can get its chunks' memory there */
static void limit(int on)
{
    if (rank != size - 1) return;
    malloc_trim(0);  /* (what the heap keeps free would serve a request without new memory) */
    struct rlimit r;
    getrlimit(RLIMIT_AS, &r);
    r.rlim_cur = on ? (rlim_t)(vm_kib() + 2048) * 1024 : r.rlim_max;
    if (setrlimit(RLIMIT_AS, &r)) FAIL("setrlimit");
}

static int allreduce_16m(MPI_Comm comm, int *ok)
{
    const size_t n = (16 << 20) / sizeof(double) + 1000;
    double *ds = (double *)(uintptr_t)dbuf[0], *dr = (double *)(uintptr_t)dbuf[1];
    fill(ds, n, rank);
    for (size_t i = 0; i < n; i++) dr[i] = -1;
    const int rc = MPI_Allreduce(ds, dr, (int)n, MPI_DOUBLE, MPI_SUM, comm);
    *ok = 1;
    for (size_t i = 0; i < n && *ok; i++) {
        double w = 0;
        for (int q = 0; q < size; q++) w += (double)((i * 7 + (size_t)q * 131) % 1000) + 1;
        *ok = dr[i] == w;
    }
    return rc;
}

static void local_failures(MPI_Comm comm, void *driver)
{
    int ok = 0, rc;
    if (allreduce_16m(comm, &ok) != MPI_SUCCESS || !ok) FAIL("MPI_Allreduce of 16 MiB before any failure");
    limit(1);
    rc = allreduce_16m(comm, &ok);
    limit(0);
    same_error(comm, "MPI_Allreduce of 16 MiB (dense chunks), no host memory", rc, MPI_ERR_NO_MEM);
    const size_t nd = (12 << 20) / sizeof(double);
    MPI_Datatype v = strided(nd, 0);
    limit(1);
    rc = bcast_check(comm, v, nd, &ok);
    limit(0);
    same_error(comm, "MPI_Bcast of 12 MiB (packed chunks), no host memory", rc, MPI_ERR_NO_MEM);
    MPI_Type_free(&v);
    int *fail_copies = (int *)dlsym(driver, "fake_cuda_fail_copies");
    if (!fail_copies) {
        FAIL("the stand-in driver has no fake_cuda_fail_copies");
        return;
    }
    *fail_copies = rank == size - 1;
    rc = allreduce_16m(comm, &ok);
    *fail_copies = 0;
    same_error(comm, "MPI_Allreduce of 16 MiB, copies failing", rc, MPI_ERR_OTHER);
    /* the communicator still works */
    if (allreduce_16m(comm, &ok) != MPI_SUCCESS || !ok) FAIL("MPI_Allreduce of 16 MiB after the failures");
}

int main(int argc, char **argv)
{
    /* large blocks from and back to the system at once (no dynamic threshold), so that a capped
     * address space is felt by the next large allocation */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 256 << 10);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    void *driver = stand_in_driver("staged_pipe_prog", NBUF, BIG + 4096, dbuf);
    want = malloc(16 << 20);
    disp = malloc(8 << 20);
    if (!driver || !want || !disp) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Type_contiguous(3, MPI_DOUBLE, &trip);
    MPI_Type_commit(&trip);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    user_op_on_derived(comm);
    many_runs(comm);
    if (size > 1 && getenv("STAGED_PIPE_FAILURES")) local_failures(comm, driver);
    MPI_Comm_free(&comm);
    MPI_Type_free(&trip);
    free(want);
    free(disp);
    int all = 0;
    PMPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("staged_pipe_prog: %s (%d ranks, %d failures)\n", all ? "FAIL" : "ok", size, all);
    MPI_Finalize();
    return all != 0;
}
