/* engine_bench: what the execution engine costs and buys, on device buffers, in one job:
 *   coalesce   K x MPI_Iallreduce of B bytes + one MPI_Waitall (automatic coalescing), the same
 *              inside ncclmpi_group_begin/end, K blocking MPI_Allreduce, and raw NCCL: K
 *              ncclAllReduce in one group + stream sync, and K separate launches + sync
 *   single     one MPI_Iallreduce + MPI_Wait vs one ncclAllReduce + sync (8 B): the per-call
 *              cost of the agreement round
 *   churn      20 x (MPI_Comm_dup + MPI_Comm_free) of MPI_COMM_WORLD before and after device
 *              use on it, and the first device collective on a fresh communicator (creation)
 * Medians of -r repetitions. Run with one rank per GPU and libncclmpi preloaded:
 *   mpirun -np 2 -x LD_PRELOAD=libncclmpi.so engine_bench [-k 64] [-s 4096] [-r 200] [-o out.csv]
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ncclmpi.h"

#include "bench_util.h"

#define CK CUDACHECK
#define NK NCCLCHECK

static int rank, size, K = 64, R = 200;
static size_t bytes = 4096;
static FILE *csv;



static int gq_query(void *x, MPI_Status *st)
{
    (void)x;
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int gq_free(void *x) { (void)x; return MPI_SUCCESS; }
static int gq_cancel(void *x, int c) { (void)x; (void)c; return MPI_SUCCESS; }

/* median over ranks-max of each repetition */
static dim3 dim3_1(void)
{
    dim3 d = {1, 1, 1};
    return d;
}

static double median(double *t, int n)
{
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(t, n, sizeof(double), bench_cmp_double);
    return t[n / 2];
}

static void report(const char *what, double us, double ref)
{
    if (rank) return;
    if (ref > 0) printf("%-44s %10.1f us   %5.2fx raw\n", what, us, us / ref);
    else printf("%-44s %10.1f us\n", what, us);
    if (csv) fprintf(csv, "\"%s\",%d,%d,%zu,%.3f,%.4f\n", what, size, K, bytes, us, ref > 0 ? us / ref : 0);  /* (names hold commas) */
}

/* The floor under a blocking one-kernel call, timed call by call after a barrier (as coll_bench
 * times a collective), medians over ranks-max:
 *   empty    an empty kernel on the legacy stream + cudaStreamSynchronize
 *   flag     a kernel that writes a pinned host flag, the host spinning on it (how a one-shot call
 *            learns its completion)
 *   ping     (2 ranks) each rank's kernel stores a flag into the peer GPU's memory (CUDA IPC),
 *            waits for the peer's, then writes the pinned host flag: the least a one-shot
 *            exchange between two GPUs can cost
 *   8 B MPI_Allreduce interleaved with them.
 * Every wait is bounded (1 s on the host, about as long in the kernel): a flag that never arrives
 * is reported, not waited for. PTX is JIT-compiled by the driver. */
static const char floor_ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry nm_empty() { ret; }\n"
    ".visible .entry nm_flag(.param .u64 h, .param .u64 v) {\n"
    "  .reg .b64 %rd<3>;\n  ld.param.u64 %rd1, [h];\n  ld.param.u64 %rd2, [v];\n"
    "  st.release.sys.global.u64 [%rd1], %rd2;\n  ret;\n}\n"
    ".visible .entry nm_ping(.param .u64 peer, .param .u64 mine, .param .u64 h, .param .u64 v) {\n"
    "  .reg .b64 %rd<8>;\n  .reg .pred %p<3>;\n"
    "  ld.param.u64 %rd1, [peer];\n  ld.param.u64 %rd2, [mine];\n  ld.param.u64 %rd3, [h];\n"
    "  ld.param.u64 %rd4, [v];\n  mov.u64 %rd6, 0;\n"
    "  st.release.sys.global.u64 [%rd1], %rd4;\n"
    "WAIT:\n  ld.acquire.sys.global.u64 %rd5, [%rd2];\n  setp.ge.u64 %p1, %rd5, %rd4;\n"
    "  @%p1 bra DONE;\n  add.u64 %rd6, %rd6, 1;\n  setp.lt.u64 %p2, %rd6, 400000000;\n  @%p2 bra WAIT;\n"
    "DONE:\n  st.release.sys.global.u64 [%rd3], %rd4;\n  ret;\n}\n"
    /* nm_resident: stays on the GPU; for each doorbell value v above the last (host memory), stores v
     * into the peer's flag, waits for the peer's, writes v to the pinned done flag; ~0 stops it.
     * Each wait gives up after 10^7 polls. */
    ".visible .entry nm_resident(.param .u64 peer, .param .u64 mine, .param .u64 door, .param .u64 done) {\n"
    "  .reg .b64 %rd<10>;\n  .reg .pred %p<4>;\n"
    "  ld.param.u64 %rd1, [peer];\n  ld.param.u64 %rd2, [mine];\n  ld.param.u64 %rd3, [door];\n"
    "  ld.param.u64 %rd4, [done];\n  mov.u64 %rd5, 0;\n"
    "LOOP:\n  mov.u64 %rd7, 0;\n"
    "DOOR:\n  ld.acquire.sys.global.u64 %rd6, [%rd3];\n  setp.gt.u64 %p1, %rd6, %rd5;\n  @%p1 bra GOT;\n"
    "  add.u64 %rd7, %rd7, 1;\n  setp.lt.u64 %p2, %rd7, 10000000;\n  @%p2 bra DOOR;\n  bra END;\n"
    "GOT:\n  setp.eq.u64 %p3, %rd6, 0xFFFFFFFFFFFFFFFF;\n  @%p3 bra END;\n  mov.u64 %rd5, %rd6;\n"
    "  st.release.sys.global.u64 [%rd1], %rd5;\n  mov.u64 %rd7, 0;\n"
    "PEER:\n  ld.acquire.sys.global.u64 %rd8, [%rd2];\n  setp.ge.u64 %p1, %rd8, %rd5;\n  @%p1 bra FIN;\n"
    "  add.u64 %rd7, %rd7, 1;\n  setp.lt.u64 %p2, %rd7, 10000000;\n  @%p2 bra PEER;\n  bra END;\n"
    "FIN:\n  st.release.sys.global.u64 [%rd4], %rd5;\n  bra LOOP;\n"
    "END:\n  ret;\n}\n";

static int spin_until(volatile unsigned long long *w, unsigned long long v)
{
    double t0 = bench_now();
    for (unsigned i = 0;; i++) {
        if (*w >= v) return 1;
        if ((i & 1023) == 0 && bench_now() - t0 > 1.0) return 0;
    }
}

/* The floor of a one-shot exchange with no launch per call (2 ranks): a kernel that stays on the GPU
 * (its own non-blocking stream) is rung by a doorbell in pinned host memory, exchanges a flag with
 * the peer GPU and writes the pinned done flag, the host spinning on it. Rung two ways, alternately:
 * a plain host store (what a call may do when the application's stream has nothing pending), and a
 * cuStreamWriteValue64 on the legacy stream (ordered after the application's work). Also the host
 * cost of asking whether the legacy stream has anything pending (cudaStreamQuery, idle stream). */
static void resident_floor(MPI_Comm c, cudaKernel_t kres, unsigned long long *peer, unsigned long long *mine,
                           unsigned long long *v)
{
    typedef int (*wv_t)(void *, unsigned long long, unsigned long long, unsigned);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    wv_t wv = drv ? (wv_t)dlsym(drv, "cuStreamWriteValue64_v2") : NULL;
    unsigned long long *door = NULL, *done = NULL;
    void *ddoor = NULL, *ddone = NULL;
    cudaStream_t rs = NULL;
    int ok = wv && cudaHostAlloc((void **)&door, 8, cudaHostAllocMapped) == cudaSuccess &&
             cudaHostAlloc((void **)&done, 8, cudaHostAllocMapped) == cudaSuccess &&
             cudaHostGetDevicePointer(&ddoor, door, 0) == cudaSuccess &&
             cudaHostGetDevicePointer(&ddone, done, 0) == cudaSuccess &&
             cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking) == cudaSuccess;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c);
    if (!all) {
        if (rank == 0) printf("resident kernel: not measured (no cuStreamWriteValue64 or allocation failed on a rank)\n");
        return;
    }
    *(volatile unsigned long long *)door = 0;
    *(volatile unsigned long long *)done = 0;
    void *ka[] = {&peer, &mine, &ddoor, &ddone};
    CK(cudaLaunchKernel((const void *)kres, dim3_1(), dim3_1(), ka, 0, rs));
    enum { W = 2 };
    double *t[W];
    for (int k = 0; k < W; k++) t[k] = malloc(R * sizeof(double));
    int lost = 0;
    for (int rep = -10; rep < R && !lost; rep++) {
        double d[W] = {0};
        for (int k = 0; k < W; k++) {
            MPI_Barrier(c);
            double a = bench_now();
            ++*v;
            if (k == 0) {
                __atomic_store_n(door, *v, __ATOMIC_RELEASE);
            } else if (wv(cudaStreamLegacy, (unsigned long long)(uintptr_t)ddoor, *v, 0) != 0) {
                lost = 1;
            }
            lost |= !spin_until(done, *v);
            d[k] = bench_now() - a;
        }
        if (rep >= 0)
            for (int k = 0; k < W; k++) t[k][rep] = d[k] * 1e6;
        int any = 0;
        MPI_Allreduce(&lost, &any, 1, MPI_INT, MPI_MAX, c);
        lost = any;
    }
    __atomic_store_n(door, ~0ULL, __ATOMIC_RELEASE);  /* stop it (it also stops by itself when lost) */
    CK(cudaStreamSynchronize(rs));
    CK(cudaStreamSynchronize(cudaStreamLegacy));
    enum { N = 20000 };
    double a = bench_now();
    for (int i = 0; i < N; i++) (void)cudaStreamQuery(cudaStreamLegacy);
    double q = (bench_now() - a) * 1e9 / N;
    double m[W];
    for (int k = 0; k < W; k++) m[k] = lost ? 0 : median(t[k], R);
    if (rank == 0) {
        if (lost) printf("resident kernel: a flag did not arrive within 1 s; not measured\n");
        else
            printf("resident kernel (us, median over ranks-max): host-store doorbell + flag ping + pinned flag %.2f; "
                   "the same rung by cuStreamWriteValue64 on the legacy stream %.2f; cudaStreamQuery(legacy, idle) "
                   "%.0f ns\n", m[0], m[1], q);
    }
    for (int k = 0; k < W; k++) free(t[k]);
    cudaStreamDestroy(rs);
    cudaFreeHost(door);
    cudaFreeHost(done);
}

static void launch_floor(MPI_Comm c)
{
    cudaLibrary_t lib;
    cudaKernel_t kempty, kflag, kping, kres;
    unsigned long long *hw = NULL, *mine = NULL, *peer = NULL;
    void *dw = NULL;
    int ok = cudaLibraryLoadData(&lib, floor_ptx, NULL, NULL, 0, NULL, NULL, 0) == cudaSuccess &&
             cudaLibraryGetKernel(&kempty, lib, "nm_empty") == cudaSuccess &&
             cudaLibraryGetKernel(&kflag, lib, "nm_flag") == cudaSuccess &&
             cudaLibraryGetKernel(&kping, lib, "nm_ping") == cudaSuccess &&
             cudaLibraryGetKernel(&kres, lib, "nm_resident") == cudaSuccess &&
             cudaHostAlloc((void **)&hw, 8, cudaHostAllocMapped) == cudaSuccess &&
             cudaHostGetDevicePointer(&dw, hw, 0) == cudaSuccess && cudaMalloc((void **)&mine, 8) == cudaSuccess &&
             cudaMemset(mine, 0, 8) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c);
    if (!all) {
        if (rank == 0) printf("launch floor: not measured (PTX load or allocation failed on a rank)\n");
        return;
    }
    int ping = size == 2;
    if (ping) {  /* exchange the flags' IPC handles */
        cudaIpcMemHandle_t h, ph;
        ping = cudaIpcGetMemHandle(&h, mine) == cudaSuccess;
        MPI_Sendrecv(&h, sizeof(h), MPI_BYTE, 1 - rank, 7, &ph, sizeof(ph), MPI_BYTE, 1 - rank, 7, c, MPI_STATUS_IGNORE);
        ping = ping && cudaIpcOpenMemHandle((void **)&peer, ph, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess;
        int both = 0;
        MPI_Allreduce(&ping, &both, 1, MPI_INT, MPI_MIN, c);
        ping = both;
    }
    float *one = NULL;
    CK(cudaMalloc((void **)&one, 8));
    CK(cudaMemset(one, 0, 8));
    enum { W = 4 };
    double *t[W];
    for (int k = 0; k < W; k++) t[k] = malloc(R * sizeof(double));
    int lost = 0;
    unsigned long long v = 0;
    *(volatile unsigned long long *)hw = 0;
    for (int rep = -10; rep < R && !lost; rep++) {
        double d[W] = {0};
        MPI_Barrier(c);
        double a = bench_now();
        CK(cudaLaunchKernel((const void *)kempty, dim3_1(), dim3_1(), NULL, 0, cudaStreamLegacy));
        CK(cudaStreamSynchronize(cudaStreamLegacy));
        d[0] = bench_now() - a;
        MPI_Barrier(c);
        a = bench_now();
        v++;
        void *fa[] = {&dw, &v};
        CK(cudaLaunchKernel((const void *)kflag, dim3_1(), dim3_1(), fa, 0, cudaStreamLegacy));
        lost |= !spin_until(hw, v);
        d[1] = bench_now() - a;
        if (ping) {
            MPI_Barrier(c);
            a = bench_now();
            v++;
            void *pa[] = {&peer, &mine, &dw, &v};
            CK(cudaLaunchKernel((const void *)kping, dim3_1(), dim3_1(), pa, 0, cudaStreamLegacy));
            lost |= !spin_until(hw, v);
            d[2] = bench_now() - a;
        }
        MPI_Barrier(c);
        a = bench_now();
        MPI_Allreduce(MPI_IN_PLACE, one, 2, MPI_FLOAT, MPI_SUM, c);
        d[3] = bench_now() - a;
        if (rep >= 0)
            for (int k = 0; k < W; k++) t[k][rep] = d[k] * 1e6;
        int any = 0;
        MPI_Allreduce(&lost, &any, 1, MPI_INT, MPI_MAX, c);
        lost = any;
    }
    CK(cudaDeviceSynchronize());
    double m[W];  /* median() is collective: every rank computes it */
    for (int k = 0; k < W; k++) m[k] = lost ? 0 : median(t[k], R);
    if (rank == 0) {
        if (lost) printf("launch floor: a flag did not arrive within 1 s; not measured\n");
        else
            printf("launch floor (us, median over ranks-max): empty kernel + sync %.2f; kernel writing a pinned flag + "
                   "spin %.2f; two-GPU flag ping + pinned flag %s%.2f; 8 B MPI_Allreduce %.2f\n",
                   m[0], m[1], ping ? "" : "(not run, needs 2 ranks) ", m[2], m[3]);
    }
    if (ping && !lost) resident_floor(c, kres, peer, mine, &v);
    if (peer) cudaIpcCloseMemHandle(peer);
    for (int k = 0; k < W; k++) free(t[k]);
    cudaFree(one);
    cudaFree(mine);
    cudaFreeHost(hw);
}

/* Three ways of one blocking operation, timed rep by rep in turn (after a barrier each) so that
 * drift hits all alike: the medians over R reps (10 first reps not counted), rank 0's. */
struct ilv {
    MPI_Comm c;
    ncclComm_t nc;
    cudaStream_t s;
    float *one;     /* 8 B cases */
    float *sa, *sr; /* the self cases' buffers, sb bytes */
    size_t sb;
};
static void ilv_allreduce(struct ilv *x) { MPI_Allreduce(MPI_IN_PLACE, x->one, 2, MPI_FLOAT, MPI_SUM, x->c); }
static void ilv_nccl_stream(struct ilv *x)
{
    NK(ncclAllReduce(x->one, x->one, 2, ncclFloat, ncclSum, x->nc, x->s));
    CK(cudaStreamSynchronize(x->s));
}
static void ilv_nccl_legacy(struct ilv *x)
{
    NK(ncclAllReduce(x->one, x->one, 2, ncclFloat, ncclSum, x->nc, cudaStreamLegacy));
    CK(cudaStreamSynchronize(cudaStreamLegacy));
}
static void ilv_self_sendrecv(struct ilv *x)
{
    const int n = (int)(x->sb / 4);
    MPI_Sendrecv(x->sa, n, MPI_FLOAT, rank, 1, x->sr, n, MPI_FLOAT, rank, 1, x->c, MPI_STATUS_IGNORE);
}
static void ilv_self_nccl(struct ilv *x)
{
    NK(ncclGroupStart());
    NK(ncclSend(x->sa, x->sb / 4, ncclFloat, rank, x->nc, x->s));
    NK(ncclRecv(x->sr, x->sb / 4, ncclFloat, rank, x->nc, x->s));
    NK(ncclGroupEnd());
    CK(cudaStreamSynchronize(x->s));
}
static void ilv_self_copy(struct ilv *x)
{
    CK(cudaMemcpyAsync(x->sr, x->sa, x->sb, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    CK(cudaStreamSynchronize(cudaStreamLegacy));
}
static void interleave3(struct ilv *x, void (*const f[3])(struct ilv *), double m[3])
{
    double *t[3];
    for (int k = 0; k < 3; k++) t[k] = malloc(R * sizeof(double));
    for (int rep = -10; rep < R; rep++)
        for (int k = 0; k < 3; k++) {
            MPI_Barrier(x->c);
            const double t0 = bench_now();
            f[k](x);
            if (rep >= 0) t[k][rep] = (bench_now() - t0) * 1e6;
        }
    for (int k = 0; k < 3; k++) {
        m[k] = median(t[k], R);
        free(t[k]);
    }
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    for (int i = 1; i < argc - 1; i++) {
        if (!strcmp(argv[i], "-k")) K = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s")) bytes = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-r")) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o")) out = argv[++i];
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gpu_select(NULL);
    if (rank == 0 && out) {
        csv = fopen(out, "w");
        if (csv) fprintf(csv, "case,ranks,k,bytes,us,ratio_to_raw\n");
    }
    int (*gbegin)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_begin");
    int (*gend)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_group_end");
    size_t n = bytes / sizeof(float);
    float **buf = malloc(K * sizeof(float *));
    for (int k = 0; k < K; k++) {
        CK(cudaMalloc((void **)&buf[k], bytes));
        CK(cudaMemset(buf[k], 0, bytes));
    }
    float *one;
    CK(cudaMalloc((void **)&one, 64));
    CK(cudaMemset(one, 0, 64));
    MPI_Request *req = malloc(K * sizeof(MPI_Request));
    double *t = malloc(R * sizeof(double));

    /* churn before any device use of MPI_COMM_WORLD */
    double churn[2];
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) MPI_Allreduce(MPI_IN_PLACE, one, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int rep = 0; rep < 5; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = bench_now();
            for (int i = 0; i < 20; i++) {
                MPI_Comm c;
                MPI_Comm_dup(MPI_COMM_WORLD, &c);
                MPI_Comm_free(&c);
            }
            t[rep] = (bench_now() - t0) * 1e6;
        }
        churn[phase] = median(t, 5);
    }

    /* raw NCCL on its own communicator */
    ncclUniqueId id;
    ncclComm_t nc;
    cudaStream_t s;
    if (rank == 0) NK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NK(ncclCommInitRank(&nc, size, id, rank));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    /* creation: the first device collective on a fresh communicator */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    MPI_Allreduce(MPI_IN_PLACE, one, 2, MPI_FLOAT, MPI_SUM, c);
    double create_ms = (bench_now() - t0) * 1e3;
    MPI_Allreduce(MPI_IN_PLACE, &create_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    for (int mode = 0; mode < 6; mode++) {
        for (int rep = -10; rep < R; rep++) {
            MPI_Barrier(c);
            double t1 = bench_now();
            switch (mode) {
            case 0: /* raw NCCL, one group */
                NK(ncclGroupStart());
                for (int k = 0; k < K; k++) NK(ncclAllReduce(buf[k], buf[k], n, ncclFloat, ncclSum, nc, s));
                NK(ncclGroupEnd());
                CK(cudaStreamSynchronize(s));
                break;
            case 1: /* raw NCCL, separate launches */
                for (int k = 0; k < K; k++) NK(ncclAllReduce(buf[k], buf[k], n, ncclFloat, ncclSum, nc, s));
                CK(cudaStreamSynchronize(s));
                break;
            case 2: /* nonblocking + Waitall: automatic coalescing */
                for (int k = 0; k < K; k++) MPI_Iallreduce(MPI_IN_PLACE, buf[k], (int)n, MPI_FLOAT, MPI_SUM, c, &req[k]);
                MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
                break;
            case 3: /* explicit group */
                if (gbegin) gbegin();
                for (int k = 0; k < K; k++) MPI_Iallreduce(MPI_IN_PLACE, buf[k], (int)n, MPI_FLOAT, MPI_SUM, c, &req[k]);
                if (gend) gend();
                MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
                break;
            case 4: /* blocking */
                for (int k = 0; k < K; k++) MPI_Allreduce(MPI_IN_PLACE, buf[k], (int)n, MPI_FLOAT, MPI_SUM, c);
                break;
            case 5: /* single nonblocking op of 8 bytes vs raw: in one timing, mpi then raw */
                MPI_Iallreduce(MPI_IN_PLACE, one, 2, MPI_FLOAT, MPI_SUM, c, &req[0]);
                MPI_Wait(&req[0], MPI_STATUS_IGNORE);
                break;
            }
            if (rep >= 0) t[rep] = (bench_now() - t1) * 1e6;
        }
        static double raw_group, raw_single;
        double m = median(t, R);
        char what[96];
        switch (mode) {
        case 0: raw_group = m; snprintf(what, sizeof(what), "raw NCCL: %d allreduce in one group", K); report(what, m, 0); break;
        case 1: snprintf(what, sizeof(what), "raw NCCL: %d allreduce, separate launches", K); report(what, m, raw_group); break;
        case 2: snprintf(what, sizeof(what), "MPI_Iallreduce x%d + MPI_Waitall", K); report(what, m, raw_group); break;
        case 3: snprintf(what, sizeof(what), "ncclmpi_group_begin/end, x%d + Waitall", K); report(what, m, gbegin ? raw_group : 0); break;
        case 4: snprintf(what, sizeof(what), "MPI_Allreduce x%d (blocking)", K); report(what, m, raw_group); break;
        case 5:
            for (int rep = -10; rep < R; rep++) {
                MPI_Barrier(c);
                double t1 = bench_now();
                NK(ncclAllReduce(one, one, 2, ncclFloat, ncclSum, nc, s));
                CK(cudaStreamSynchronize(s));
                if (rep >= 0) t[rep] = (bench_now() - t1) * 1e6;
            }
            raw_single = median(t, R);
            report("raw NCCL: one 8 B allreduce + sync", raw_single, 0);
            report("MPI_Iallreduce 8 B + MPI_Wait", m, raw_single);
            for (int rep = -10; rep < R; rep++) {
                MPI_Barrier(c);
                double t1 = bench_now();
                MPI_Allreduce(MPI_IN_PLACE, one, 2, MPI_FLOAT, MPI_SUM, c);
                if (rep >= 0) t[rep] = (bench_now() - t1) * 1e6;
            }
            report("MPI_Allreduce 8 B (blocking)", median(t, R), raw_single);
            break;
        }
    }
    /* where the time of the coalesced case goes: issuing the K calls, the launch (group end),
     * and the Waitall, as medians over ranks-max; and the driver and MPI primitives the layer
     * uses per operation, on one rank */
    {
        double *ti = malloc(R * sizeof(double)), *tg = malloc(R * sizeof(double)), *tw = malloc(R * sizeof(double));
        for (int grp = 0; grp < 2; grp++) {
            if (grp && !gbegin) break;
            for (int rep = -10; rep < R; rep++) {
                MPI_Barrier(c);
                double t1 = bench_now();
                if (grp) gbegin();
                for (int k = 0; k < K; k++) MPI_Iallreduce(MPI_IN_PLACE, buf[k], (int)n, MPI_FLOAT, MPI_SUM, c, &req[k]);
                double t2 = bench_now();
                if (grp) gend();
                double t3 = bench_now();
                MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
                double t4 = bench_now();
                if (rep >= 0) {
                    ti[rep] = (t2 - t1) * 1e6;
                    tg[rep] = (t3 - t2) * 1e6;
                    tw[rep] = (t4 - t3) * 1e6;
                }
            }
            double mi = median(ti, R), mg = median(tg, R), mw = median(tw, R);
            if (rank == 0)
                printf("breakdown %-10s issue %d calls %8.1f us (%.2f us/call), group end %6.1f us, Waitall %8.1f us\n",
                       grp ? "explicit" : "automatic", K, mi, mi / K, mg, mw);
        }
        free(ti);
        free(tg);
        free(tw);
        /* the blocking 8 B call against raw NCCL on both streams, interleaved rep by rep so
         * drift hits all three alike */
        {
            struct ilv x = {c, nc, s, one, NULL, NULL, 0};
            void (*const f[3])(struct ilv *) = {ilv_allreduce, ilv_nccl_stream, ilv_nccl_legacy};
            double m[3];
            interleave3(&x, f, m);
            if (rank == 0)
                printf("interleaved 8 B: MPI_Allreduce %.2f us, raw NCCL on a stream %.2f us (+%.2f), on the legacy stream %.2f us (+%.2f)\n",
                       m[0], m[1], m[0] - m[1], m[2], m[0] - m[2]);
        }
        /* a blocking device MPI_Sendrecv from each rank to itself (16 KiB, the row of a 4096-wide
         * float grid: a periodic halo at one rank), interleaved with raw NCCL's send and receive
         * to itself in one group + stream sync, and the floor, one cudaMemcpyAsync on the legacy
         * stream + sync (the receive buffer is written when each returns) */
        {
            struct ilv x = {c, nc, s, NULL, NULL, NULL, 16384};
            CK(cudaMalloc((void **)&x.sa, x.sb));
            CK(cudaMalloc((void **)&x.sr, x.sb));
            CK(cudaMemset(x.sa, 1, x.sb));
            void (*const f[3])(struct ilv *) = {ilv_self_sendrecv, ilv_self_nccl, ilv_self_copy};
            double m[3];
            interleave3(&x, f, m);
            if (rank == 0)
                printf("interleaved self 16 KiB: MPI_Sendrecv %.2f us, raw NCCL send+recv to itself %.2f us (%.2fx), "
                       "cudaMemcpyAsync + sync %.2f us (%.2fx)\n", m[0], m[1], m[0] / m[1], m[2], m[0] / m[2]);
            CK(cudaFree(x.sa));
            CK(cudaFree(x.sr));
        }
        launch_floor(c);
        if (rank == 0) {
            enum { N = 20000 };
            cudaEvent_t ev;
            CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
            double a = bench_now();
            for (int i = 0; i < N; i++) cudaEventRecord(ev, cudaStreamLegacy);
            double rec_legacy = (bench_now() - a) * 1e9 / N;
            a = bench_now();
            for (int i = 0; i < N; i++) cudaEventRecord(ev, s);
            double rec_s = (bench_now() - a) * 1e9 / N;
            a = bench_now();
            for (int i = 0; i < N; i++) cudaStreamWaitEvent(s, ev, 0);
            double wait_ev = (bench_now() - a) * 1e9 / N;
            CK(cudaStreamSynchronize(s));
            a = bench_now();
            for (int i = 0; i < N; i++) cudaEventQuery(ev);
            double query = (bench_now() - a) * 1e9 / N;
            MPI_Request gr;
            a = bench_now();
            for (int i = 0; i < N; i++) {
                PMPI_Grequest_start(gq_query, gq_free, gq_cancel, NULL, &gr);
                PMPI_Grequest_complete(gr);
                PMPI_Wait(&gr, MPI_STATUS_IGNORE);
            }
            double greq = (bench_now() - a) * 1e9 / N;
            int flag;
            a = bench_now();
            for (int i = 0; i < N; i++) PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
            double iprobe = (bench_now() - a) * 1e9 / N;
            a = bench_now();
            for (int i = 0; i < N; i++) {
                NK(ncclGroupStart());
                NK(ncclGroupEnd());
            }
            double group = (bench_now() - a) * 1e9 / N;
            /* what ncclmpi adds to mark a launch's completion: a 64-bit write into pinned host memory */
            double wv_legacy = -1, wv_s = -1;
            void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            typedef int (*wv_t)(void *, unsigned long long, unsigned long long, unsigned);
            wv_t wv = drv ? (wv_t)dlsym(drv, "cuStreamWriteValue64_v2") : NULL;
            unsigned long long *word = NULL;
            void *dword = NULL;
            if (wv && cudaHostAlloc((void **)&word, 8, cudaHostAllocMapped) == cudaSuccess &&
                cudaHostGetDevicePointer(&dword, word, 0) == cudaSuccess) {
                a = bench_now();
                for (int i = 0; i < N; i++) wv(cudaStreamLegacy, (unsigned long long)(uintptr_t)dword, (unsigned long long)i, 0);
                wv_legacy = (bench_now() - a) * 1e9 / N;
                CK(cudaStreamSynchronize(cudaStreamLegacy));
                a = bench_now();
                for (int i = 0; i < N; i++) wv(s, (unsigned long long)(uintptr_t)dword, (unsigned long long)i, 0);
                wv_s = (bench_now() - a) * 1e9 / N;
                CK(cudaStreamSynchronize(s));
                cudaFreeHost(word);
            }
            printf("primitives (ns/call): cudaEventRecord legacy %.0f, on a stream %.0f; cudaStreamWaitEvent %.0f; "
                   "cudaEventQuery (complete) %.0f; cuStreamWriteValue64 legacy %.0f, on a stream %.0f; "
                   "empty ncclGroupStart/End %.0f; Grequest start+complete+Wait %.0f; Iprobe(COMM_SELF) %.0f\n",
                   rec_legacy, rec_s, wait_ev, query, wv_legacy, wv_s, group, greq, iprobe);
            /* the completion tests a blocking call could use, on an idle stream and on one held
             * back by a wait on a host word (not ready); and the pointer queries that classify
             * a buffer (three attributes, as ncclmpi asks, against one) */
            typedef int (*wait32_t)(void *, unsigned long long, unsigned, unsigned);
            typedef int (*pga_t)(unsigned, int *, void **, unsigned long long);
            typedef int (*pg1_t)(void *, int, unsigned long long);
            wait32_t w32 = drv ? (wait32_t)dlsym(drv, "cuStreamWaitValue32_v2") : NULL;
            pga_t pga = drv ? (pga_t)dlsym(drv, "cuPointerGetAttributes") : NULL;
            pg1_t pg1 = drv ? (pg1_t)dlsym(drv, "cuPointerGetAttribute") : NULL;
            double sq_idle = -1, sq_busy = -1, eq_busy = -1, pq3_dev = -1, pq1_dev = -1, pq3_host = -1, pq1_host = -1;
            a = bench_now();
            for (int i = 0; i < N; i++) cudaStreamQuery(cudaStreamLegacy);
            sq_idle = (bench_now() - a) * 1e9 / N;
            volatile unsigned *hold = NULL;
            void *dhold = NULL;
            if (w32 && cudaHostAlloc((void **)&hold, 64, cudaHostAllocMapped) == cudaSuccess &&
                cudaHostGetDevicePointer(&dhold, (void *)hold, 0) == cudaSuccess) {
                *hold = 0;
                w32(s, (unsigned long long)(uintptr_t)dhold, 1, 0 /* GEQ */);
                CK(cudaEventRecord(ev, s));
                a = bench_now();
                int nr = 0;
                for (int i = 0; i < N; i++) nr += cudaStreamQuery(s) == cudaErrorNotReady;
                sq_busy = (bench_now() - a) * 1e9 / N;
                a = bench_now();
                for (int i = 0; i < N; i++) nr += cudaEventQuery(ev) == cudaErrorNotReady;
                eq_busy = (bench_now() - a) * 1e9 / N;
                *hold = 1;
                CK(cudaStreamSynchronize(s));
                if (nr != 2 * N) sq_busy = eq_busy = -1;  /* (the wait did not hold the stream) */
                cudaFreeHost((void *)hold);
            }
            if (pga && pg1) {
                int attrs[3] = {2 /* MEMORY_TYPE */, 9 /* DEVICE_ORDINAL */, 8 /* IS_MANAGED */};
                unsigned type = 0, managed = 0;
                int ord = -1;
                void *vals[3] = {&type, &ord, &managed};
                char *hostp = malloc(1 << 20);  /* (a large malloc: mmap'd, outside the known ranges) */
                a = bench_now();
                for (int i = 0; i < N; i++) pga(3, attrs, vals, (unsigned long long)(uintptr_t)buf[0]);
                pq3_dev = (bench_now() - a) * 1e9 / N;
                a = bench_now();
                for (int i = 0; i < N; i++) pg1(&type, 2, (unsigned long long)(uintptr_t)buf[0]);
                pq1_dev = (bench_now() - a) * 1e9 / N;
                a = bench_now();
                for (int i = 0; i < N; i++) pga(3, attrs, vals, (unsigned long long)(uintptr_t)hostp);
                pq3_host = (bench_now() - a) * 1e9 / N;
                a = bench_now();
                for (int i = 0; i < N; i++) pg1(&type, 2, (unsigned long long)(uintptr_t)hostp);
                pq1_host = (bench_now() - a) * 1e9 / N;
                free(hostp);
            }
            printf("primitives (ns/call): cudaStreamQuery idle legacy %.0f, not ready %.0f; cudaEventQuery not ready %.0f; "
                   "pointer query 3 attributes device %.0f, host %.0f; 1 attribute device %.0f, host %.0f\n",
                   sq_idle, sq_busy, eq_busy, pq3_dev, pq3_host, pq1_dev, pq1_host);
            CK(cudaEventDestroy(ev));
        }
    }
    report("20 x Comm_dup+free, before device use", churn[0], 0);
    report("20 x Comm_dup+free, after device use", churn[1], 0);
    if (rank == 0) printf("%-44s %10.2f (target <= 2)\n", "churn ratio after/before", churn[1] / churn[0]);
    if (rank == 0 && csv) fprintf(csv, "churn ratio,%d,20,0,%.3f,%.4f\n", size, churn[1] / churn[0], churn[1] / churn[0]);
    report("first device collective on a fresh comm (ms)", create_ms, 0);
    {  /* how many of the nonblocking allreduces ncclmpi ran on NCCL shared NCCL calls (NCCLMPI_FUSE) */
        int (*route)(const char *, int, unsigned long long *) =
            (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
        unsigned long long nccl = 0, fused = 0;
        if (route && rank == 0 && route("Iallreduce", NCCLMPI_ROUTE_NCCL, &nccl) == 0 &&
            route("Iallreduce", NCCLMPI_ROUTE_FUSED, &fused) == 0)
            printf("%-44s %10llu of %llu MPI_Iallreduce on NCCL (rank 0)\n", "fused into shared NCCL calls", fused, nccl);
    }

    MPI_Comm_free(&c);
    ncclCommDestroy(nc);
    if (csv) fclose(csv);
    MPI_Finalize();
    return 0;
}
