/* mpix_stream: MPICH's stream extension as ncclmpi provides it (include/ncclmpi.h). Streams made
 * from a cudaStream_t (MPIX_Info_set_hex), communicators with a stream (dup copies it, the handle
 * may be freed while a communicator uses it), MPIX_Allreduce_enqueue of several types, ops (NCCL's,
 * one NCCL lacks, a user-defined one), counts, in place and host buffers, each
 * ordered after the stream's earlier work (the inputs are copied in on the stream, the outputs
 * out, and only then is the stream synchronised) and checked against a float64/integer host
 * computation; 64 enqueued calls in flight at once; enqueued calls interleaved with blocking and
 * nonblocking ones on the same communicator; a rank without a stream calling MPI_Allreduce
 * against the others' enqueued calls; enqueued point-to-point (Send/Recv, Isend/Irecv/Waitall, a
 * ring) with statuses; errors (no stream, a general stream, a stream info without its value);
 * calls still in flight when the communicator is freed and the CUDA stream destroyed; with
 * MPIX_STREAM_THREADS=1, two threads enqueueing on communicators of their own at once.
 * Where the communicator's route is NCCL's (one GPU per rank), the GPU build also holds the
 * stream with a wait on a host flag while the call is made: the call must return without waiting
 * for the stream; and rank 0 sends rank 1 a synchronous host message after its enqueued call,
 * which rank 1 receives before its own (both hang, a failure under the test's timeout, if the
 * call waits).
 *
 * Built two ways: -DNM_GPU_TEST (CUDA runtime, a non-blocking stream) and -DNM_STAND_IN_TEST (the
 * stand-in driver of test/unit: memory it tracks, copies done at once). Skips (77) without a GPU
 * or the stand-in, or without ncclmpi in the process. 1 to 4 ranks. */
#include <mpi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ncclmpi.h"

#if defined(NM_GPU_TEST)
#include <cuda.h>
#include <cuda_runtime.h>
typedef cudaStream_t strm_t;
static strm_t S;
static void die(const char *what)
{
    fprintf(stderr, "mpix_stream: %s failed\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}
static void *dev_new(size_t n)
{
    void *p;
    if (cudaMalloc(&p, n) != cudaSuccess) die("cudaMalloc");
    return p;
}
static void dev_free(void *p) { cudaFree(p); }
static void host_free(void *p) { cudaFreeHost(p); }
static void *host_new(size_t n)  /* pinned: the copies on the stream are asynchronous */
{
    void *p;
    if (cudaMallocHost(&p, n) != cudaSuccess) die("cudaMallocHost");
    return p;
}
static void h2d(void *d, const void *h, size_t n) { if (cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, S) != cudaSuccess) die("copy in"); }
static void d2h(void *h, const void *d, size_t n) { if (cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, S) != cudaSuccess) die("copy out"); }
static void poison_dev(void *d, size_t n) { if (cudaMemsetAsync(d, 0xA5, n, S) != cudaSuccess) die("memset"); }
/* copies that do not touch the stream (the legacy stream, which a non-blocking stream skips) */
static void h2d_now(void *d, const void *h, size_t n) { if (cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) die("copy in"); }
static void d2h_now(void *h, const void *d, size_t n) { if (cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess) die("copy out"); }
static void sync_stream(void) { if (cudaStreamSynchronize(S) != cudaSuccess) die("cudaStreamSynchronize"); }
static strm_t new_stream(void)
{
    strm_t t;
    if (cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking) != cudaSuccess) die("cudaStreamCreate");
    return t;
}
static void sync_on(strm_t t) { if (cudaStreamSynchronize(t) != cudaSuccess) die("cudaStreamSynchronize"); }
static int dev_init(int lrank)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return 0;
    cudaSetDevice(lrank % n);
    return cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking) == cudaSuccess;
}
/* the stream waits until the host writes 1 to *flag (cuStreamWaitValue32 through the driver) */
static volatile unsigned *flag;
static int hold_stream(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned) =
        drv ? (CUresult(*)(CUstream, CUdeviceptr, cuuint32_t, unsigned))dlsym(drv, "cuStreamWaitValue32_v2") : NULL;
    if (!wait32) return 0;
    if (!flag && cudaHostAlloc((void **)&flag, sizeof(unsigned), cudaHostAllocMapped) != cudaSuccess) return 0;
    void *dflag;
    if (cudaHostGetDevicePointer(&dflag, (void *)flag, 0) != cudaSuccess) return 0;
    *flag = 0;
    return wait32((CUstream)S, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS;
}
static void release_stream(void) { __atomic_store_n(flag, 1, __ATOMIC_RELEASE); }
static int stream_busy(void) { return cudaStreamQuery(S) == cudaErrorNotReady; }
static void stream_destroy(void) { if (cudaStreamDestroy(S) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) die("cudaStreamDestroy"); }
#elif defined(NM_STAND_IN_TEST)
#include "../unit/stand_in.h"
typedef CUstream strm_t;
static strm_t S;
enum { NBUF = 16, BUFSZ = 4 << 20 };
static CUdeviceptr bufs[NBUF];
static int used[NBUF];
static CUresult (*destroy_fn)(CUstream);
static void *dev_new(size_t n)
{
    void *p = stand_in_take(bufs, used, NBUF, BUFSZ, n);
    if (!p) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static void dev_free(void *p) { stand_in_give(bufs, used, NBUF, p); }
static void host_free(void *p) { free(p); }
static void *host_new(size_t n) { return malloc(n); }
/* the stand-in driver's copies, in the stream's order as a GPU's (they run later where its
 * streams do: FAKE_CUDA_ASYNC=1) */
static CUresult (*copy_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream), (*copy_now_fn)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*set_fn)(CUdeviceptr, unsigned char, size_t, CUstream), (*sync_fn)(CUstream);
static void h2d(void *d, const void *h, size_t n) { copy_fn((CUdeviceptr)d, (CUdeviceptr)h, n, S); }
static void d2h(void *h, const void *d, size_t n) { copy_fn((CUdeviceptr)h, (CUdeviceptr)d, n, S); }
static void poison_dev(void *d, size_t n) { set_fn((CUdeviceptr)d, 0xA5, n, S); }
static void h2d_now(void *d, const void *h, size_t n) { copy_now_fn((CUdeviceptr)d, (CUdeviceptr)h, n); }
static void d2h_now(void *h, const void *d, size_t n) { copy_now_fn((CUdeviceptr)h, (CUdeviceptr)d, n); }
static void sync_stream(void) { sync_fn(S); }
static CUresult (*create_fn)(CUstream *, unsigned);
static strm_t new_stream(void)
{
    strm_t t = NULL;
    if (!create_fn || create_fn(&t, 0)) MPI_Abort(MPI_COMM_WORLD, 2);
    return t;
}
static void sync_on(strm_t t) { sync_fn(t); }
static int dev_init(int lrank)
{
    (void)lrank;
    void *h = stand_in_driver("mpix_stream", NBUF, BUFSZ, bufs);
    create_fn = h ? (CUresult(*)(CUstream *, unsigned))dlsym(h, "cuStreamCreate") : NULL;
    /* (cuda.h names it cuStreamDestroy_v2, as drivers export it) */
    destroy_fn = h ? (CUresult(*)(CUstream))dlsym(h, "cuStreamDestroy_v2") : NULL;
    copy_fn = h ? (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))dlsym(h, "cuMemcpyAsync") : NULL;
    copy_now_fn = h ? (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t))dlsym(h, "cuMemcpy") : NULL;
    set_fn = h ? (CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream))dlsym(h, "cuMemsetD8Async") : NULL;
    sync_fn = h ? (CUresult(*)(CUstream))dlsym(h, "cuStreamSynchronize") : NULL;
    return create_fn && destroy_fn && copy_fn && copy_now_fn && set_fn && sync_fn && create_fn(&S, 0) == CUDA_SUCCESS;
}
static int hold_stream(void) { return 0; }
static void release_stream(void) {}
static int stream_busy(void) { return 0; }
static void stream_destroy(void) { destroy_fn(S); }
#else
#error "build with -DNM_GPU_TEST or -DNM_STAND_IN_TEST"
#endif

/* the extension, found in the preloaded library */
#define API(ret, name, args) static ret(*p_##name) args;
#define APIS(X)                                                                                           \
    X(int, MPIX_Info_set_hex, (MPI_Info, const char *, const void *, int))                                \
    X(int, MPIX_Stream_create, (MPI_Info, MPIX_Stream *))                                                 \
    X(int, MPIX_Stream_free, (MPIX_Stream *))                                                             \
    X(int, MPIX_Stream_comm_create, (MPI_Comm, MPIX_Stream, MPI_Comm *))                                  \
    X(int, MPIX_Stream_comm_create_multiplex, (MPI_Comm, int, MPIX_Stream *, MPI_Comm *))                  \
    X(int, MPIX_Comm_get_stream, (MPI_Comm, int, MPIX_Stream *))                                          \
    X(int, MPIX_Stream_progress, (MPIX_Stream))                                                           \
    X(int, MPIX_Send_enqueue, (const void *, int, MPI_Datatype, int, int, MPI_Comm))                      \
    X(int, MPIX_Recv_enqueue, (void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *))              \
    X(int, MPIX_Isend_enqueue, (const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *))      \
    X(int, MPIX_Irecv_enqueue, (void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *))            \
    X(int, MPIX_Waitall_enqueue, (int, MPI_Request *, MPI_Status *))                                      \
    X(int, MPIX_Wait_enqueue, (MPI_Request *, MPI_Status *))                                              \
    X(int, MPIX_Allreduce_enqueue, (const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm))            \
    X(int, ncclmpi_get_route_calls, (const char *, int, unsigned long long *))
APIS(API)
#define LOAD(ret, name, args) ok_api &= (p_##name = (ret(*) args)dlsym(RTLD_DEFAULT, #name)) != NULL;

static int rank, size, failures;
static long checks;
static const char *tcase = "init";

__attribute__((format(printf, 3, 4))) static void EQ(double got, double want, const char *fmt, ...)
{
    checks++;
    if (got == want) return;
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (failures++ < 20) fprintf(stderr, "mpix_stream: rank %d: %s: %s: got %.17g want %.17g\n", rank, tcase, what, got, want);
}
#define OK(call) EQ((call), MPI_SUCCESS, "%s", #call)

static int err_class(int rc)
{
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

/* value of element i on rank r: small integers, exact in every type below */
static double val(int r, int i) { return (double)((r + 1) * ((i % 13) + 1)); }

static unsigned long long route_calls(const char *fn, int route)
{
    unsigned long long n = 0;
    p_ncclmpi_get_route_calls(fn, route, &n);
    return n;
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

/* one Allreduce_enqueue of n ints or doubles on device buffers: copy in on the stream, enqueue,
 * copy out, then synchronise and check against the host reduction */
enum { T_INT, T_DOUBLE };
static void allreduce_case(MPI_Comm sc, int type, int n, MPI_Op op, int inplace, const char *what)
{
    const size_t es = type == T_INT ? sizeof(int) : sizeof(double), bytes = (size_t)n * es;
    MPI_Datatype dt = type == T_INT ? MPI_INT : MPI_DOUBLE;
    char *hin = host_new(bytes ? bytes : 1), *hout = host_new(bytes ? bytes : 1);
    void *din = dev_new(bytes ? bytes : 1), *dout = inplace ? din : dev_new(bytes ? bytes : 1);
    for (int i = 0; i < n; i++) {
        if (type == T_INT) ((int *)hin)[i] = (int)val(rank, i);
        else ((double *)hin)[i] = val(rank, i);
    }
    memset(hout, 0x5A, bytes);
    if (!inplace) poison_dev(dout, bytes);
    h2d(din, hin, bytes);
    OK(p_MPIX_Allreduce_enqueue(inplace ? MPI_IN_PLACE : din, dout, n, dt, op, sc));
    d2h(hout, dout, bytes);
    sync_stream();
    for (int i = 0; i < n; i++) {
        double want = op == MPI_MAX ? val(size - 1, i) : op == MPI_MIN ? val(0, i) : 0;
        if (op != MPI_MAX && op != MPI_MIN)
            for (int r = 0; r < size; r++) want += val(r, i);  /* SUM and the user's sum */
        if (op == MPI_BAND) {
            int w = ~0;
            for (int r = 0; r < size; r++) w &= (int)val(r, i);
            want = w;
        }
        const double got = type == T_INT ? ((int *)hout)[i] : ((double *)hout)[i];
        if (got != want) {
            EQ(got, want, "%s: %d elements, element %d", what, n, i);
            break;
        }
    }
    checks++;
    dev_free(din);
    if (!inplace) dev_free(dout);
    host_free(hin), host_free(hout);
}

/* MPIX_STREAM_THREADS=1 (MPI_THREAD_MULTIPLE): two threads, each with a stream and a communicator of
 * its own, enqueue allreduces at once; odd ranks start the second thread first */
enum { TH_N = 3000, TH_ITERS = 40 };
struct th {
    MPI_Comm comm;
    strm_t stream;
    int *d;  /* TH_N ints of device memory (taken before the threads start) */
    int id, bad;
};
static void *th_body(void *arg)
{
    struct th *t = arg;
    int *h = malloc(TH_N * sizeof(int)), *d = t->d;
    for (int it = 0; it < TH_ITERS; it++) {
        for (int i = 0; i < TH_N; i++) h[i] = (int)val(rank, i + it + 7 * t->id);
        h2d_now(d, h, TH_N * sizeof(int));
        if (p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, d, TH_N, MPI_INT, MPI_SUM, t->comm) != MPI_SUCCESS) t->bad++;
        sync_on(t->stream);
        d2h_now(h, d, TH_N * sizeof(int));
        for (int i = 0; i < TH_N; i++) {
            int want = 0;
            for (int r = 0; r < size; r++) want += (int)val(r, i + it + 7 * t->id);
            if (h[i] != want) { t->bad++; break; }
        }
    }
    free(h);
    return NULL;
}
static void threads_case(void)
{
    tcase = "threads";
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("mpix_stream: threads case not run (MPI_THREAD_MULTIPLE not provided)\n");
        return;
    }
    struct th t[2];
    pthread_t tid[2];
    for (int k = 0; k < 2; k++) {  /* (communicators made in the same order on every rank) */
        MPI_Info info;
        MPIX_Stream ms;
        t[k].stream = new_stream(), t[k].id = k, t[k].bad = 0, t[k].d = dev_new(TH_N * sizeof(int));
        MPI_Info_create(&info);
        MPI_Info_set(info, "type", "cudaStream_t");
        p_MPIX_Info_set_hex(info, "value", &t[k].stream, sizeof(t[k].stream));
        OK(p_MPIX_Stream_create(info, &ms));
        OK(p_MPIX_Stream_comm_create(MPI_COMM_WORLD, ms, &t[k].comm));
        p_MPIX_Stream_free(&ms);
        MPI_Info_free(&info);
    }
    for (int k = 0; k < 2; k++) {
        const int j = rank % 2 ? 1 - k : k;
        pthread_create(&tid[j], NULL, th_body, &t[j]);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(tid[k], NULL);
        EQ(t[k].bad, 0, "thread %d: failed calls or wrong sums", k);
        MPI_Comm_free(&t[k].comm);
    }
    if (rank == 0) printf("mpix_stream: threads case run\n");
}

int main(int argc, char **argv)
{
    const char *thr = getenv("MPIX_STREAM_THREADS");
    const int threads = thr && *thr == '1';
    int provided;
    if (threads) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    else MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    int lrank;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    int ok_api = 1;
    APIS(LOAD)
    int ready = ok_api && dev_init(lrank), all = 0;
    MPI_Allreduce(&ready, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (rank == 0) printf("mpix_stream: skipped (%s)\n", ok_api ? "no GPU or stand-in driver" : "ncclmpi not preloaded");
        MPI_Finalize();
        return 77;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* ---- objects ---- */
    tcase = "objects";
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "type", "cudaStream_t");
    MPIX_Stream st = MPIX_STREAM_NULL, got = MPIX_STREAM_NULL, gen = MPIX_STREAM_NULL;
    EQ(err_class(p_MPIX_Stream_create(info, &st)), MPI_ERR_ARG, "a cudaStream_t info without \"value\"");
    OK(p_MPIX_Info_set_hex(info, "value", &S, sizeof(S)));
    OK(p_MPIX_Stream_create(info, &st));
    MPI_Info_free(&info);
    MPI_Comm sc, dup, gc;
    OK(p_MPIX_Stream_comm_create(MPI_COMM_WORLD, st, &sc));
    MPI_Comm_set_errhandler(sc, MPI_ERRORS_RETURN);
    OK(p_MPIX_Comm_get_stream(sc, 0, &got));
    EQ(got == st, 1, "MPIX_Comm_get_stream gives the stream attached");
    OK(p_MPIX_Comm_get_stream(sc, 1, &got));
    EQ(got == MPIX_STREAM_NULL, 1, "MPIX_Comm_get_stream beyond the streams gives MPIX_STREAM_NULL");
    OK(MPI_Comm_dup(sc, &dup));
    OK(p_MPIX_Comm_get_stream(dup, 0, &got));
    EQ(got == st, 1, "a duplicate keeps the stream");
    OK(p_MPIX_Stream_free(&st));  /* the communicators keep it */
    EQ(st == MPIX_STREAM_NULL, 1, "MPIX_Stream_free sets the handle to MPIX_STREAM_NULL");
    OK(p_MPIX_Stream_progress(MPIX_STREAM_NULL));

    /* ---- errors ---- */
    tcase = "errors";
    int x = 1, y = 0;
    EQ(err_class(p_MPIX_Allreduce_enqueue(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD)), MPI_ERR_ARG,
       "an enqueue call on a communicator without a stream");
    OK(p_MPIX_Stream_create(MPI_INFO_NULL, &gen));  /* a general stream */
    OK(p_MPIX_Stream_comm_create(MPI_COMM_WORLD, gen, &gc));
    MPI_Comm_set_errhandler(gc, MPI_ERRORS_RETURN);
    EQ(err_class(p_MPIX_Send_enqueue(&x, 1, MPI_INT, rank, 0, gc)), MPI_ERR_ARG, "an enqueue call on a general stream's communicator");
    MPI_Comm mc;
    MPIX_Stream two[2] = {gen, gen};
    OK(p_MPIX_Stream_comm_create_multiplex(MPI_COMM_WORLD, 2, two, &mc));
    OK(p_MPIX_Comm_get_stream(mc, 1, &got));
    EQ(got == gen, 1, "a multiplex communicator's second stream");
    MPI_Comm_free(&mc);
    MPI_Comm_free(&gc);
    OK(p_MPIX_Stream_free(&gen));

    /* ---- MPIX_Allreduce_enqueue ---- */
    tcase = "allreduce";
    MPI_Op usum;
    MPI_Op_create(user_sum, 1, &usum);
    const int counts[] = {1, 1000, 300000};
    for (int k = 0; k < 3; k++) {
        allreduce_case(sc, T_DOUBLE, counts[k], MPI_SUM, 0, "double sum");
        allreduce_case(sc, T_INT, counts[k], MPI_SUM, 1, "int sum in place");
        allreduce_case(sc, T_INT, counts[k], MPI_MAX, 0, "int max");
        allreduce_case(dup, T_DOUBLE, counts[k], MPI_MIN, 1, "double min in place (a duplicate)");
        allreduce_case(sc, T_INT, counts[k], MPI_BAND, 0, "int band (NCCL has no band)");
        allreduce_case(sc, T_INT, counts[k], usum, 0, "a user-defined op");
    }
    OK(MPI_Comm_free(&dup));
    {  /* host buffers */
        tcase = "allreduce host buffers";
        const int n = 4096;
        int *hs = malloc(n * sizeof(int)), *hd = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) hs[i] = (int)val(rank, i), hd[i] = -1;
        OK(p_MPIX_Allreduce_enqueue(hs, hd, n, MPI_INT, MPI_SUM, sc));
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int r = 0; r < size; r++) want += (int)val(r, i);
            if (hd[i] != want) { EQ(hd[i], want, "host buffers, element %d", i); break; }
        }
        free(hs), free(hd);
    }
    {  /* 64 in flight, then interleaved with blocking and nonblocking calls on the same communicator */
        tcase = "in flight";
        enum { K = 64, N = 2048 };
        double *h = host_new((size_t)K * N * sizeof(double)), *hr = host_new((size_t)K * N * sizeof(double));
        double *d = dev_new((size_t)4 * N * sizeof(double)), *dx = dev_new(N * sizeof(double)), *dy = dev_new(N * sizeof(double));
        for (int k = 0; k < K; k++)
            for (int i = 0; i < N; i++) h[(size_t)k * N + i] = val(rank, i + k);
        for (int k = 0; k < K; k++) {  /* four device buffers reused in stream order */
            double *dk = d + (size_t)(k % 4) * N;
            h2d(dk, h + (size_t)k * N, N * sizeof(double));
            OK(p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, dk, N, MPI_DOUBLE, MPI_SUM, sc));
            d2h(hr + (size_t)k * N, dk, N * sizeof(double));
            if (k % 16 == 5) {  /* blocking and nonblocking calls of the communicator while these run */
                double *chk = host_new(N * sizeof(double));
                h2d_now(dx, h + (size_t)k * N, N * sizeof(double));
                h2d_now(dy, h + (size_t)k * N, N * sizeof(double));
                OK(MPI_Allreduce(MPI_IN_PLACE, dx, N, MPI_DOUBLE, MPI_MAX, sc));
                MPI_Request rq;
                OK(MPI_Iallreduce(MPI_IN_PLACE, dy, N, MPI_DOUBLE, MPI_MIN, sc, &rq));
                OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
                d2h_now(chk, dx, N * sizeof(double));
                for (int i = 0; i < N; i++)
                    if (chk[i] != val(size - 1, i + k)) { EQ(chk[i], val(size - 1, i + k), "blocking max among enqueued calls"); break; }
                d2h_now(chk, dy, N * sizeof(double));
                for (int i = 0; i < N; i++)
                    if (chk[i] != val(0, i + k)) { EQ(chk[i], val(0, i + k), "nonblocking min among enqueued calls"); break; }
            }
        }
        sync_stream();
        for (int k = 0; k < K; k++)
            for (int i = 0; i < N; i++) {
                double want = 0;
                for (int r = 0; r < size; r++) want += val(r, i + k);
                if (hr[(size_t)k * N + i] != want) { EQ(hr[(size_t)k * N + i], want, "call %d of %d, element %d", k, K, i); break; }
            }
    }

    /* ---- the stream held by the host while the call is made (NCCL route only) ---- */
    tcase = "held stream";
    int nccl = 0;  /* the communicator's route is NCCL's (agreed: the same on every rank) */
    {
        const unsigned long long before = route_calls("Allreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Allreduce", NCCLMPI_ROUTE_ONESHOT);
        double *d = dev_new(64 * sizeof(double)), *h = host_new(64 * sizeof(double));
        for (int i = 0; i < 64; i++) h[i] = val(rank, i);
        h2d(d, h, 64 * sizeof(double));
        sync_stream();
        OK(MPI_Allreduce(MPI_IN_PLACE, d, 64, MPI_DOUBLE, MPI_MAX, sc));  /* which route? (agreed) */
        nccl = route_calls("Allreduce", NCCLMPI_ROUTE_NCCL) + route_calls("Allreduce", NCCLMPI_ROUTE_ONESHOT) > before;
        int held = nccl && hold_stream(), all_held = 0;
        MPI_Allreduce(&held, &all_held, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (held && !all_held) release_stream();
        if (all_held) {
            h2d(d, h, 64 * sizeof(double));
            OK(p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, d, 64, MPI_DOUBLE, MPI_SUM, sc));  /* must not wait */
            EQ(stream_busy(), 1, "the stream is still held after the enqueued call returned");
            release_stream();
            d2h(h, d, 64 * sizeof(double));
            sync_stream();
            for (int i = 0; i < 64; i++) {
                double want = 0;
                for (int r = 0; r < size; r++) want += val(r, i);
                if (h[i] != want) { EQ(h[i], want, "enqueued behind a held stream, element %d", i); break; }
            }
        }
        if (rank == 0) printf("mpix_stream: route %s; held-stream case %s\n", nccl ? "NCCL" : "not NCCL", all_held ? "run" : "not run");
    }

    /* ---- host messages crossing enqueued calls (NCCL route only: there the call returns at once,
     * so rank 0's synchronous send after its call meets rank 1's receive before rank 1's call) ---- */
    tcase = "crossing";
    if (nccl && size > 1) {
        const int n = 4096;
        int *h = host_new(n * sizeof(int)), *d = dev_new(n * sizeof(int)), token = 0;
        for (int i = 0; i < n; i++) h[i] = (int)val(rank, i);
        h2d(d, h, n * sizeof(int));
        if (rank == 1) OK(MPI_Recv(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, d, n, MPI_INT, MPI_SUM, sc));
        if (rank == 0) {
            token = 42;
            OK(MPI_Ssend(&token, 1, MPI_INT, 1, 99, MPI_COMM_WORLD));
        }
        d2h(h, d, n * sizeof(int));
        sync_stream();
        if (rank == 1) EQ(token, 42, "the host message");
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int r = 0; r < size; r++) want += (int)val(r, i);
            if (h[i] != want) { EQ(h[i], want, "crossing, element %d", i); break; }
        }
        dev_free(d), host_free(h);
    }

    /* ---- a rank without a stream calls MPI_Allreduce against the others' enqueued calls ---- */
    tcase = "mixed ranks";
    if (size > 1) {
        MPI_Info in2;
        MPI_Info_create(&in2);
        MPI_Info_set(in2, "type", "cudaStream_t");
        p_MPIX_Info_set_hex(in2, "value", &S, sizeof(S));
        MPIX_Stream s2 = MPIX_STREAM_NULL;
        if (rank != size - 1) OK(p_MPIX_Stream_create(in2, &s2));
        MPI_Info_free(&in2);
        MPI_Comm mixed;
        OK(p_MPIX_Stream_comm_create(MPI_COMM_WORLD, s2, &mixed));
        const int n = 5000;
        int *h = host_new(n * sizeof(int)), *d = dev_new(n * sizeof(int));
        for (int it = 0; it < 3; it++) {
            for (int i = 0; i < n; i++) h[i] = (int)val(rank, i + it);
            h2d(d, h, n * sizeof(int));
            if (rank == size - 1) {
                sync_stream();
                OK(MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_INT, MPI_SUM, mixed));
            } else {
                OK(p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, d, n, MPI_INT, MPI_SUM, mixed));
            }
            d2h(h, d, n * sizeof(int));
            sync_stream();
            for (int i = 0; i < n; i++) {
                int want = 0;
                for (int r = 0; r < size; r++) want += (int)val(r, i + it);
                if (h[i] != want) { EQ(h[i], want, "iteration %d, element %d", it, i); break; }
            }
        }
        MPI_Comm_free(&mixed);
        if (s2) p_MPIX_Stream_free(&s2);
    }

    /* ---- point-to-point ---- */
    tcase = "point-to-point";
    {
        const int n = 70000, right = (rank + 1) % size, left = (rank + size - 1) % size;
        int *hs = host_new(n * sizeof(int)), *hr = host_new(n * sizeof(int));
        int *ds = dev_new(n * sizeof(int)), *dr = dev_new(n * sizeof(int));
        for (int i = 0; i < n; i++) hs[i] = (int)val(rank, i) + 1000 * rank;
        h2d(ds, hs, n * sizeof(int));
        poison_dev(dr, n * sizeof(int));
        MPI_Request rq[2];
        MPI_Status stt[2];
        OK(p_MPIX_Irecv_enqueue(dr, n, MPI_INT, MPI_ANY_SOURCE, 40 + left, sc, &rq[0]));
        OK(p_MPIX_Isend_enqueue(ds, n, MPI_INT, right, 40 + rank, sc, &rq[1]));
        OK(p_MPIX_Waitall_enqueue(2, rq, stt));
        d2h(hr, dr, n * sizeof(int));
        sync_stream();
        EQ(stt[0].MPI_SOURCE, left, "ring: status source");
        EQ(stt[0].MPI_TAG, 40 + left, "ring: status tag");
        int cnt = -1;
        MPI_Get_count(&stt[0], MPI_INT, &cnt);
        EQ(cnt, n, "ring: status count");
        for (int i = 0; i < n; i++)
            if (hr[i] != (int)val(left, i) + 1000 * left) { EQ(hr[i], (int)val(left, i) + 1000 * left, "ring: element %d", i); break; }
        /* pairs: even ranks send first, odd ranks receive first (blocking forms) */
        const int peer = rank ^ 1;
        if (peer < size) {
            poison_dev(dr, n * sizeof(int));
            MPI_Status s1;
            if (rank % 2 == 0) {
                OK(p_MPIX_Send_enqueue(ds, n / 2, MPI_INT, peer, 7, sc));
                OK(p_MPIX_Recv_enqueue(dr, n, MPI_INT, peer, 7, sc, &s1));
            } else {
                OK(p_MPIX_Recv_enqueue(dr, n, MPI_INT, peer, 7, sc, &s1));
                OK(p_MPIX_Send_enqueue(ds, n / 2, MPI_INT, peer, 7, sc));
            }
            d2h(hr, dr, n * sizeof(int));
            sync_stream();
            MPI_Get_count(&s1, MPI_INT, &cnt);
            EQ(cnt, n / 2, "pair: status count");
            for (int i = 0; i < n / 2; i++)
                if (hr[i] != (int)val(peer, i) + 1000 * peer) { EQ(hr[i], (int)val(peer, i) + 1000 * peer, "pair: element %d", i); break; }
            /* a request completed by MPIX_Wait_enqueue */
            MPI_Request r1;
            if (rank % 2 == 0) OK(p_MPIX_Isend_enqueue(ds, 3, MPI_INT, peer, 8, sc, &r1));
            else OK(p_MPIX_Irecv_enqueue(dr, 3, MPI_INT, peer, 8, sc, &r1));
            OK(p_MPIX_Wait_enqueue(&r1, &s1));
            EQ(r1 == MPI_REQUEST_NULL, 1, "MPIX_Wait_enqueue frees the request");
        }
    }
    MPI_Op_free(&usum);
    if (threads) threads_case();
    /* ---- teardown: calls still in flight when the communicator (the stream's last reference) is
     * freed and the CUDA stream destroyed, before MPI_Finalize ---- */
    tcase = "teardown";
    {
        const int n = 1000;
        int *h = host_new(n * sizeof(int)), *d = dev_new(n * sizeof(int));
        for (int i = 0; i < n; i++) h[i] = (int)val(rank, i);
        h2d(d, h, n * sizeof(int));
        for (int k = 0; k < 5; k++) OK(p_MPIX_Allreduce_enqueue(MPI_IN_PLACE, d, n, MPI_INT, MPI_SUM, sc));
        d2h(h, d, n * sizeof(int));
        OK(MPI_Comm_free(&sc));
        stream_destroy();  /* (the GPU build waits for the device after it) */
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int r = 0; r < size; r++) want += (int)val(r, i);
            for (int k = 1; k < 5; k++) want *= size;
            if (h[i] != want) { EQ(h[i], want, "five in-place sums, element %d", i); break; }
        }
    }

    int fails = 0;
    long nchecks = 0;
    MPI_Allreduce(&failures, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&checks, &nchecks, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (fails) printf("mpix_stream: %d of %ld checks failed\n", fails, nchecks);
        else printf("mpix_stream: ok (%ld checks, %d ranks)\n", nchecks, size);
    }
    MPI_Finalize();
    return fails ? 1 : 0;
}
