/* device_overhead: N device-buffer MPI calls of one kind on one rank, for counting the host
 * instructions ncclmpi spends on its NCCL route (the layer cost the engine adds to what NCCL
 * itself costs). Runs on a machine without a GPU against the stand-in driver and NCCL
 * (test/unit/fake_cuda.c, fake_nccl.c), which complete everything at once, so what callgrind
 * counts inside dv_loop() is ncclmpi's own work plus a few instructions of the stand-ins.
 * bench/device_overhead.sh drives it; on a GPU machine the same kinds are timed against raw NCCL
 * by bench/engine_bench.
 *
 *   device_overhead N KIND [--time | --stages]
 *     KIND  allreduce   blocking MPI_Allreduce, 2 floats in place, MPI_COMM_WORLD
 *           bcast       blocking MPI_Bcast, 2 floats
 *           iallreduce  MPI_Iallreduce + MPI_Wait, 2 floats in place
 *           burst       64 x MPI_Iallreduce + one MPI_Waitall (N counts operations)
 *           group       the same inside ncclmpi_group_begin/end (N counts operations)
 *           enqueue     MPIX_Allreduce_enqueue, 2 floats in place, on a communicator of a stream
 *           persistent  MPI_Start + MPI_Wait of one MPI_Allreduce_init request, 2 floats in place
 *                       (MPI-4: where the MPI has it; each start is ncclmpi's MPI_Iallreduce)
 *
 * Output: kind=<k> n=<N> ok=<0|1> legacy_events=<e> | ns_per_call=<t>   (ok: the calls took the
 * NCCL route; e: events the N calls recorded on the legacy stream, with the stand-in driver)
 *
 * --stages: timed as --time, and with NCCLMPI_NVTX=2 and NVTX_INJECTION64_PATH naming
 * bench/stage_profile's library, a line per NVTX range of the timed loop:
 *   stage=<name> per_call=<ranges per call> self_ns=<per call>
 * (self: less the ranges nested in it and the profiler's own cost; bench/stage_profile.sh).
 * DV_COUNT=C: C floats per operation (default 2; the buffers are C floats each).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <ncclmpi.h> /* ncclmpi_stats_t (the function is looked up: no link to ncclmpi) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stage_profile.h"

enum { K_ALLREDUCE, K_BCAST, K_IALLREDUCE, K_BURST, K_GROUP, K_ENQUEUE, K_PERSIST, K_COUNT };
static const char *const kind_name[K_COUNT] = {"allreduce", "bcast", "iallreduce", "burst", "group", "enqueue", "persistent"};
enum { BURST = 64 };

static float *dbuf[BURST];
static int errors;
static int (*group_begin)(void), (*group_end)(void); /* ncclmpi's, looked up */
static int (*enqueue)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
static MPI_Comm scomm; /* of a stream (enqueue) */
static MPI_Request preq = MPI_REQUEST_NULL; /* MPI_Allreduce_init's (persistent) */
static int count = 2;                       /* floats per operation (DV_COUNT) */

__attribute__((noinline)) void dv_loop(int kind, long n)
{
    MPI_Request req[BURST];
    switch (kind) {
    case K_ALLREDUCE:
        for (long i = 0; i < n; i++)
            if (MPI_Allreduce(MPI_IN_PLACE, dbuf[0], count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) errors++;
        break;
    case K_BCAST:
        for (long i = 0; i < n; i++)
            if (MPI_Bcast(dbuf[0], count, MPI_FLOAT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) errors++;
        break;
    case K_IALLREDUCE:
        for (long i = 0; i < n; i++)
            if (MPI_Iallreduce(MPI_IN_PLACE, dbuf[0], count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[0]) != MPI_SUCCESS ||
                MPI_Wait(&req[0], MPI_STATUS_IGNORE) != MPI_SUCCESS)
                errors++;
        break;
    case K_BURST:
    case K_GROUP:
        for (long i = 0; i < n; i += BURST) {
            if (kind == K_GROUP && group_begin() != MPI_SUCCESS) errors++;
            for (int k = 0; k < BURST; k++)
                if (MPI_Iallreduce(MPI_IN_PLACE, dbuf[k], count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]) != MPI_SUCCESS) errors++;
            if (kind == K_GROUP && group_end() != MPI_SUCCESS) errors++;
            if (MPI_Waitall(BURST, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS) errors++;
        }
        break;
    case K_ENQUEUE:
        for (long i = 0; i < n; i++)
            if (enqueue(MPI_IN_PLACE, dbuf[0], count, MPI_FLOAT, MPI_SUM, scomm) != MPI_SUCCESS) errors++;
        break;
    case K_PERSIST:
        for (long i = 0; i < n; i++)
            if (MPI_Start(&preq) != MPI_SUCCESS || MPI_Wait(&preq, MPI_STATUS_IGNORE) != MPI_SUCCESS) errors++;
        break;
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s N KIND [--time]\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]);
    int kind = -1;
    for (int k = 0; k < K_COUNT; k++)
        if (!strcmp(argv[2], kind_name[k])) kind = k;
    int stages = argc > 3 && !strcmp(argv[3], "--stages");
    int timed = stages || (argc > 3 && !strcmp(argv[3], "--time"));
    if (getenv("DV_COUNT")) count = atoi(getenv("DV_COUNT"));
    if (count < 1) count = 1;
    if (kind < 0 || n < 0) {
        fprintf(stderr, "%s: unknown kind %s\n", argv[0], argv[2]);
        return 2;
    }
    /* the driver first, as a CUDA application has it: ncclmpi finds it in the process */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "%s: %s\n", argv[0], dlerror());
        return 2;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2");
    CUcontext ctx;
    if (!init || !retain || !setcur || !alloc || init(0) || retain(&ctx, 0) || setcur(ctx)) {
        fprintf(stderr, "%s: the driver in the process cannot make a context\n", argv[0]);
        return 2;
    }
    for (int k = 0; k < BURST; k++) {
        CUdeviceptr p;
        if (alloc(&p, count * sizeof(float) < 64 ? 64 : count * sizeof(float))) return 2;
        dbuf[k] = (float *)p;
    }
    MPI_Init(&argc, &argv);
    group_begin = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    group_end = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    if (kind == K_GROUP && (!group_begin || !group_end)) {
        fprintf(stderr, "%s: group: ncclmpi_group_begin/end not found (libncclmpi not preloaded)\n", argv[0]);
        return 2;
    }
    if (kind == K_ENQUEUE) {  /* a stream of the stand-in driver, attached to a communicator */
        CUresult (*mkstream)(CUstream *, unsigned) = (CUresult(*)(CUstream *, unsigned))dlsym(h, "cuStreamCreate");
        int (*sethex)(MPI_Info, const char *, const void *, int) =
            (int (*)(MPI_Info, const char *, const void *, int))dlsym(RTLD_DEFAULT, "MPIX_Info_set_hex");
        int (*mk)(MPI_Info, MPIX_Stream *) = (int (*)(MPI_Info, MPIX_Stream *))dlsym(RTLD_DEFAULT, "MPIX_Stream_create");
        int (*scc)(MPI_Comm, MPIX_Stream, MPI_Comm *) = (int (*)(MPI_Comm, MPIX_Stream, MPI_Comm *))dlsym(RTLD_DEFAULT, "MPIX_Stream_comm_create");
        enqueue = (int (*)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm))dlsym(RTLD_DEFAULT, "MPIX_Allreduce_enqueue");
        CUstream cs;
        MPI_Info info;
        MPIX_Stream ms;
        if (!mkstream || !sethex || !mk || !scc || !enqueue || mkstream(&cs, 0)) {
            fprintf(stderr, "%s: enqueue: no stream, or MPIX_* not found (libncclmpi not preloaded)\n", argv[0]);
            return 2;
        }
        MPI_Info_create(&info);
        MPI_Info_set(info, "type", "cudaStream_t");
        sethex(info, "value", &cs, sizeof(cs));
        if (mk(info, &ms) != MPI_SUCCESS || scc(MPI_COMM_WORLD, ms, &scomm) != MPI_SUCCESS) return 2;
        MPI_Info_free(&info);
    }
    if (kind == K_PERSIST) {  /* (looked up: an MPI without MPI-4 has no MPI_Allreduce_init) */
        typedef int (*init_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
        init_fn ari = (init_fn)dlsym(RTLD_DEFAULT, "MPI_Allreduce_init");
        if (!ari || ari(MPI_IN_PLACE, dbuf[0], count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &preq) != MPI_SUCCESS) {
            fprintf(stderr, "%s: no MPI_Allreduce_init in this MPI (MPI-4)\n", argv[0]);
            MPI_Finalize();
            return 77;
        }
    }
    /* the first calls make the communicator's NCCL communicator: a nonblocking one marks it, the
     * next blocking collective creates it */
    const long first = kind == K_BURST || kind == K_GROUP ? BURST : 1;
    dv_loop(kind, first);
    MPI_Barrier(MPI_COMM_WORLD);
    dv_loop(kind, first);
    /* the route taken: ncclmpi_get_stats counts routes per function */
    int (*get)(const char *, ncclmpi_stats_t *) = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    const char *fn = kind == K_BCAST ? "Bcast" : kind == K_ALLREDUCE || kind == K_ENQUEUE ? "Allreduce" : "Iallreduce";
    ncclmpi_stats_t s0, s1;
    int ok = get && get(fn, &s0) == 0;
    /* the stand-in driver counts the events recorded on the legacy stream (the points that order
     * ncclmpi's work after the application's) */
    unsigned long *recs = (unsigned long *)dlsym(h, "fake_cuda_legacy_records"), r0 = recs ? *recs : 0;
    dv_loop(kind, n);
    const long legacy_events = recs ? (long)(*recs - r0) : -1;
    ok = ok && get(fn, &s1) == 0 && s1.route[NCCLMPI_ROUTE_NCCL] - s0.route[NCCLMPI_ROUTE_NCCL] == (unsigned long long)n &&
         s1.route[NCCLMPI_ROUTE_STAGED] == s0.route[NCCLMPI_ROUTE_STAGED];
    double ns = 0;
    /* --stages: the profiler's sums before and after the timed loop */
    stage_profile_snapshot_fn snap = NULL;
    struct stage_profile_row sp0[STAGE_PROFILE_MAX_ROWS], sp1[STAGE_PROFILE_MAX_ROWS];
    int n0 = 0, n1 = 0;
    double probe[2] = {0, 0};
    if (stages) {
        const char *path = getenv("NVTX_INJECTION64_PATH");
        void *ph = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
        snap = ph ? (stage_profile_snapshot_fn)dlsym(ph, "stage_profile_snapshot") : NULL;
        if (!snap) {
            fprintf(stderr, "%s: --stages: no stage_profile library loaded (NCCLMPI_NVTX=2 and NVTX_INJECTION64_PATH)\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
        n0 = snap(sp0, STAGE_PROFILE_MAX_ROWS, probe);
    }
    if (timed) {
        double t0 = now_ns();
        dv_loop(kind, n);
        ns = (now_ns() - t0) / (n ? n : 1);
    }
    if (stages) n1 = snap(sp1, STAGE_PROFILE_MAX_ROWS, probe);
    if (timed) printf("kind=%s n=%ld ok=%d ns_per_call=%.1f\n", kind_name[kind], n, ok && !errors, ns);
    for (int i = 0; i < n1; i++) { /* rows only grow, in order */
        long long c = sp1[i].count, se = sp1[i].self_ns, ch = sp1[i].children;
        if (i < n0) {
            c -= sp0[i].count;
            se -= sp0[i].self_ns;
            ch -= sp0[i].children;
        }
        if (c <= 0 || n <= 0) continue;
        printf("stage=%s per_call=%.3f self_ns=%.1f\n", sp1[i].name, (double)c / n, (se - c * probe[1] - ch * (probe[0] - probe[1])) / n);
    }
    if (stages) printf("probe_ns=%.1f inner_ns=%.1f\n", probe[0], probe[1]);
    else printf("kind=%s n=%ld ok=%d legacy_events=%ld\n", kind_name[kind], n, ok && !errors, legacy_events);
    MPI_Finalize();
    return errors ? 1 : 0;
}
