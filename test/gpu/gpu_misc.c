/* gpu_misc: device point-to-point (tags, MPI_ANY_SOURCE, statuses, nonblocking in mixed
 * arrays), managed and pinned memory routes, mixed host/device buffers (NCCLMPI_AGREE=1),
 * error classes for device misuse, and communicator lifecycle (split / dup / free in a loop).
 * Every result is checked against values computed on the host. */
#include "gpu_common.h"

static int rank, size, failures;
#define CHECK GPU_CHECK

static int *dev_ints(int n, int base)
{
    int *h = malloc(n * sizeof(int)), *d;
    for (int i = 0; i < n; i++) h[i] = base + i * 3 + 1;
    CUDACHECK(cudaMalloc((void **)&d, n * sizeof(int) + 16));
    CUDACHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void check_dev_ints(const int *d, int n, int base, const char *what)
{
    int *h = malloc(n * sizeof(int));
    CUDACHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != base + i * 3 + 1) {
            CHECK(0, "%s: element %d = %d, want %d", what, i, h[i], base + i * 3 + 1);
            break;
        }
    free(h);
}

static void test_p2p(void)
{
    const int n = 100003;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int *s = dev_ints(n, rank * 1000), *r = dev_ints(n, -1);
    MPI_Status st;
    /* blocking ring with Sendrecv, then Isend/Irecv with ANY_SOURCE and a tag */
    MPI_Sendrecv(s, n, MPI_INT, next, 5, r, n, MPI_INT, prev, 5, MPI_COMM_WORLD, &st);
    check_dev_ints(r, n, prev * 1000, "Sendrecv");
    int cnt;
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 5 && cnt == n, "Sendrecv status src %d tag %d count %d",
          st.MPI_SOURCE, st.MPI_TAG, cnt);
    CUDACHECK(cudaMemset(r, 0, n * sizeof(int)));
    MPI_Request rq[3];
    int hostval = rank, hostgot = -1;
    MPI_Irecv(r, n, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &rq[0]);
    MPI_Irecv(&hostgot, 1, MPI_INT, next, 8, MPI_COMM_WORLD, &rq[1]);
    MPI_Send(s, n, MPI_INT, next, 7, MPI_COMM_WORLD);
    MPI_Isend(&hostval, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, &rq[2]);
    MPI_Status sts[3];
    MPI_Waitall(3, rq, sts);
    check_dev_ints(r, n, prev * 1000, "Irecv(ANY_SOURCE)");
    MPI_Get_count(&sts[0], MPI_INT, &cnt);
    CHECK(sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == 7 && cnt == n, "Irecv status src %d tag %d count %d",
          sts[0].MPI_SOURCE, sts[0].MPI_TAG, cnt);
    CHECK(hostgot == next, "host Irecv beside device Irecv got %d", hostgot);
    /* a shorter message into a longer device buffer leaves the tail untouched */
    int *big = dev_ints(n, 77);
    MPI_Sendrecv(s, 10, MPI_INT, next, 9, big, n, MPI_INT, prev, 9, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(cnt == 10, "short message count %d", cnt);
    int *h = malloc(n * sizeof(int));
    CUDACHECK(cudaMemcpy(h, big, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(h[0] == prev * 1000 + 1 && h[9] == prev * 1000 + 28 && h[10] == 77 + 31 && h[n - 1] == 77 + (n - 1) * 3 + 1,
          "short message into long buffer: %d %d %d %d", h[0], h[9], h[10], h[n - 1]);
    /* to itself: one device copy where the receive can take only the call's own send (the tail of a
     * longer buffer untouched); with an earlier message pending (any tag) the receive takes that
     * one and the call's send goes to the receive posted for it */
    int *mine = dev_ints(n + 8, -5), *early = dev_ints(n, 555), *r2 = dev_ints(n, -9);
    MPI_Sendrecv(s, n, MPI_INT, rank, 12, mine, n + 8, MPI_INT, rank, 12, MPI_COMM_WORLD, &st);
    check_dev_ints(mine, n, rank * 1000, "Sendrecv to itself");
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 12 && cnt == n, "Sendrecv to itself: status src %d tag %d count %d",
          st.MPI_SOURCE, st.MPI_TAG, cnt);
    int tail[8];
    CUDACHECK(cudaMemcpy(tail, mine + n, sizeof(tail), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 8; i++) CHECK(tail[i] == -5 + (n + i) * 3 + 1, "Sendrecv to itself: tail %d = %d", i, tail[i]);
    MPI_Request pr[2];
    MPI_Irecv(r2, n, MPI_INT, rank, 14, MPI_COMM_WORLD, &pr[0]);
    MPI_Isend(early, n, MPI_INT, rank, 13, MPI_COMM_WORLD, &pr[1]);
    MPI_Sendrecv(s, n, MPI_INT, rank, 14, mine, n, MPI_INT, rank, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    check_dev_ints(mine, n, 555, "Sendrecv to itself, an earlier message pending");
    CHECK(st.MPI_TAG == 13, "Sendrecv to itself, an earlier message pending: tag %d", st.MPI_TAG);
    MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    check_dev_ints(r2, n, rank * 1000, "Sendrecv to itself: its send to the receive posted before");
    cudaFree(mine);
    cudaFree(early);
    cudaFree(r2);
    /* MPI_Sendrecv_replace of a large device buffer receiving around the ring what an MPI_Isend
     * sent (an envelope where they are on: decoded into the buffer), then to itself */
    int *rep = dev_ints(n, -3);
    MPI_Request rq2;
    MPI_Isend(s, n, MPI_INT, next, 15, MPI_COMM_WORLD, &rq2);
    MPI_Sendrecv_replace(rep, n, MPI_INT, MPI_PROC_NULL, 0, prev, 15, MPI_COMM_WORLD, &st);
    MPI_Wait(&rq2, MPI_STATUS_IGNORE);
    check_dev_ints(rep, n, prev * 1000, "Sendrecv_replace around the ring");
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 15 && cnt == n, "Sendrecv_replace status src %d tag %d count %d",
          st.MPI_SOURCE, st.MPI_TAG, cnt);
    MPI_Sendrecv_replace(rep, n, MPI_INT, rank, 16, rank, 16, MPI_COMM_WORLD, &st);
    check_dev_ints(rep, n, prev * 1000, "Sendrecv_replace to itself");
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 16 && cnt == n, "Sendrecv_replace to itself: status src %d tag %d count %d",
          st.MPI_SOURCE, st.MPI_TAG, cnt);
    cudaFree(rep);
    /* Test loop on a device Irecv */
    MPI_Request q;
    int flag = 0;
    MPI_Irecv(big, n, MPI_INT, prev, 11, MPI_COMM_WORLD, &q);
    MPI_Send(s, n, MPI_INT, next, 11, MPI_COMM_WORLD);
    while (!flag) MPI_Test(&q, &flag, &st);
    check_dev_ints(big, n, prev * 1000, "Irecv+Test");
    free(h);
    cudaFree(s);
    cudaFree(r);
    cudaFree(big);
}

static void test_memory_kinds(int distinct)
{
    const int n = 4099;
    /* managed memory: correct either way; NCCL route when each rank has its own GPU */
    int *m;
    CUDACHECK(cudaMallocManaged((void **)&m, 2 * n * sizeof(int), cudaMemAttachGlobal));
    for (int i = 0; i < n; i++) m[i] = rank + i;
    nm_stats_view_t before = gpu_stats("Allreduce");
    MPI_Allreduce(m, m + n, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CUDACHECK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++)
        if (m[n + i] != size * i + size * (size - 1) / 2) {
            CHECK(0, "managed Allreduce element %d = %d", i, m[n + i]);
            break;
        }
    nm_stats_view_t after = gpu_stats("Allreduce");
    if (before.calls != (unsigned long long)-1)
        CHECK(distinct ? after.route[NCCLMPI_ROUTE_NCCL] + after.oneshot ==
                             before.route[NCCLMPI_ROUTE_NCCL] + before.oneshot + 1 /* NCCL or one-shot */
                       : after.route[NCCLMPI_ROUTE_STAGED] == before.route[NCCLMPI_ROUTE_STAGED] + 1,
              "managed memory route");
    cudaFree(m);
    /* pinned host memory (cudaMallocHost): the real MPI, unchanged */
    int *p;
    CUDACHECK(cudaMallocHost((void **)&p, 2 * n * sizeof(int)));
    for (int i = 0; i < n; i++) p[i] = rank * 2 + i;
    before = gpu_stats("Allreduce");
    MPI_Allreduce(p, p + n, n, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        if (p[n + i] != (size - 1) * 2 + i) {
            CHECK(0, "pinned Allreduce element %d = %d", i, p[n + i]);
            break;
        }
    after = gpu_stats("Allreduce");
    if (before.calls != (unsigned long long)-1)
        CHECK(after.route[NCCLMPI_ROUTE_NCCL] == before.route[NCCLMPI_ROUTE_NCCL] &&
                  after.route[NCCLMPI_ROUTE_STAGED] == before.route[NCCLMPI_ROUTE_STAGED] && after.oneshot == before.oneshot,
              "pinned memory must take the host route");
    cudaFreeHost(p);
    /* host memory where ncclmpi knows it without asking the driver (the caller's stack, malloc's
     * heap, static data; NCCLMPI_HOST_RANGES) and where it asks (a large malloc, which is mapped;
     * heap memory registered with cudaHostRegister): each the host route, each the right sum */
    static int in_static[2 * 64];
    int on_stack[2 * 64];
    int *small = malloc(2 * 64 * sizeof(int));           /* the program break's range */
    int *large = malloc(2 * 1048576 * sizeof(int));      /* mapped (beyond malloc's mmap threshold) */
    int *registered = malloc(2 * 64 * sizeof(int));
    CUDACHECK(cudaHostRegister(registered, 2 * 64 * sizeof(int), cudaHostRegisterDefault));
    struct {
        int *b;
        int cnt;
        const char *what;
    } hosts[] = {{on_stack, 64, "stack"}, {small, 64, "small malloc"}, {in_static, 64, "static"},
                 {large, 1048576, "large malloc"}, {registered, 64, "cudaHostRegister'ed"}};
    for (int k = 0; k < 5; k++) {
        int *b = hosts[k].b, cnt = hosts[k].cnt;
        for (int i = 0; i < cnt; i++) {
            b[i] = rank * 3 + i + k;
            b[cnt + i] = -7;
        }
        before = gpu_stats("Allreduce");
        MPI_Allreduce(b, b + cnt, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        after = gpu_stats("Allreduce");
        int bad = -1;
        for (int i = 0; i < cnt && bad < 0; i++)
            if (b[cnt + i] != 3 * size * (size - 1) / 2 + size * (i + k)) bad = i;
        CHECK(bad < 0, "%s Allreduce element %d = %d", hosts[k].what, bad, bad < 0 ? 0 : b[cnt + bad]);
        if (before.calls != (unsigned long long)-1)
            CHECK(after.route[NCCLMPI_ROUTE_HOST] == before.route[NCCLMPI_ROUTE_HOST] + 1, "%s memory must take the host route",
                  hosts[k].what);
    }
    CUDACHECK(cudaHostUnregister(registered));
    free(registered);
    free(large);
    free(small);
}

/* NCCLMPI_AGREE=1: even ranks pass host buffers, odd ranks device buffers, in one Allreduce */
static void test_mixed(void)
{
    const int n = 1000;
    int *h = malloc(n * sizeof(int)), *res = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) h[i] = rank * 10 + i;
    int *sd = NULL, *rd = NULL;
    if (rank % 2) {
        CUDACHECK(cudaMalloc((void **)&sd, n * sizeof(int)));
        CUDACHECK(cudaMalloc((void **)&rd, n * sizeof(int)));
        CUDACHECK(cudaMemcpy(sd, h, n * sizeof(int), cudaMemcpyHostToDevice));
        MPI_Allreduce(sd, rd, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CUDACHECK(cudaMemcpy(res, rd, n * sizeof(int), cudaMemcpyDeviceToHost));
    } else {
        MPI_Allreduce(h, res, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    for (int i = 0; i < n; i++)
        if (res[i] != 10 * size * (size - 1) / 2 + size * i) {
            CHECK(0, "mixed host/device Allreduce element %d = %d", i, res[i]);
            break;
        }
    free(h);
    free(res);
    cudaFree(sd);
    cudaFree(rd);
}

static void test_errors(int ndev)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int *d = dev_ints(16, 0), cls = 0, rc;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    /* a call ncclmpi does not run on device memory (the buffered sends' buffer) */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Buffer_attach(d, 16 * (int)sizeof(int));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_BUFFER, "MPI_Buffer_attach of a device buffer: rc %d class %d", rc, cls);
    MPI_Error_string(rc, msg, &len);
    CHECK(strstr(msg, "MPI_Buffer_attach") != NULL, "error string names the call: \"%s\"", msg);
    /* a negative count on device buffers: the real MPI's class, as without ncclmpi */
    rc = MPI_Allreduce(d, d + 8, -1, MPI_INT, MPI_SUM, c);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "negative count: class %d", cls);
    if (ndev >= 2) { /* send and receive buffers on two devices */
        int cur, other;
        cudaGetDevice(&cur);
        other = (cur + 1) % ndev;
        int *o;
        CUDACHECK(cudaSetDevice(other));
        CUDACHECK(cudaMalloc((void **)&o, 64));
        CUDACHECK(cudaSetDevice(cur));
        rc = MPI_Allreduce(d, o, 4, MPI_INT, MPI_SUM, c);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "buffers on two devices: class %d", cls);
        cudaFree(o);
    }
    cudaFree(d);
    MPI_Comm_free(&c);
}

static void test_lifecycle(void)
{
    const int n = 257;
    for (int it = 0; it < 6; it++) {
        MPI_Comm c;
        if (it % 2) MPI_Comm_dup(MPI_COMM_WORLD, &c);
        else MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &c);
        int cs, cr;
        MPI_Comm_size(c, &cs);
        MPI_Comm_rank(c, &cr);
        float *d, *h = malloc(n * sizeof(float));
        CUDACHECK(cudaMalloc((void **)&d, n * sizeof(float)));
        for (int i = 0; i < n; i++) h[i] = (float)(cr + it + i);
        CUDACHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
        MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_FLOAT, MPI_SUM, c);
        CUDACHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            if (h[i] != (float)(cs * (it + i) + cs * (cs - 1) / 2)) {
                CHECK(0, "lifecycle %d element %d = %g", it, i, h[i]);
                break;
            }
        cudaFree(d);
        free(h);
        MPI_Comm_free(&c);
    }
}

/* more than 2 GiB of bytes in one call (counts stay below INT_MAX elements) */
static void test_large(void)
{
    size_t freeb = 0, totalb = 0;
    cudaMemGetInfo(&freeb, &totalb);
    int enough = freeb > ((size_t)8 << 30), all = 0;
    MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (rank == 0) printf("gpu_misc: large test skipped (less than 8 GiB free)\n");
        return;
    }
    const int n = (int)((((size_t)2 << 30) + ((size_t)64 << 20)) / sizeof(float)); /* 2.0625 GiB */
    float *d;
    CUDACHECK(cudaMalloc((void **)&d, (size_t)n * sizeof(float)));
    float *h = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 1000) + (float)rank;
    CUDACHECK(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    MPI_Allreduce(MPI_IN_PLACE, d, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CUDACHECK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += 4099) /* sampled, plus the last element */
        if (h[i] != (float)(size * (i % 1000) + size * (size - 1) / 2)) {
            CHECK(0, "2 GiB Allreduce element %d = %g", i, h[i]);
            break;
        }
    CHECK(h[n - 1] == (float)(size * ((n - 1) % 1000) + size * (size - 1) / 2), "2 GiB Allreduce last element %g", h[n - 1]);
    /* a byte count above 2 GiB in one datatype-less move: Bcast as bytes of a contiguous type */
    MPI_Datatype blk;
    MPI_Type_contiguous(1024, MPI_FLOAT, &blk);
    MPI_Type_commit(&blk);
    if (rank == size - 1) for (int i = 0; i < n; i++) h[i] = (float)(i % 777);
    if (rank == size - 1) CUDACHECK(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    MPI_Bcast(d, n / 1024, blk, size - 1, MPI_COMM_WORLD);
    CUDACHECK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += 4099)
        if (h[i] != (float)(i % 777)) {
            CHECK(0, "2 GiB Bcast element %d = %g", i, h[i]);
            break;
        }
    MPI_Type_free(&blk);
    free(h);
    cudaFree(d);
}

/* Which device messages go as envelopes with NCCLMPI_P2P_ENVELOPE=auto (the default): from
 * NCCLMPI_P2P_ENVELOPE_MIN (8 KiB), or, where the ranks outnumber the GPUs and the process does
 * not run under MPS, from k x 512 KiB (k ranks per GPU, rounded up): the rule of doc/design.md,
 * restated here from the test's own facts. Messages just below and at that size between ring
 * neighbours, counted by ncclmpi's envelope counter and checked byte for byte; skipped where the
 * settings are not the defaults or envelopes are off for the job (an 8 MiB message is staged). */
static void test_envelope_sizes(int ndev)
{
    unsigned long long (*sent)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_test_envelopes_sent");
    const char *env = getenv("NCCLMPI_P2P_ENVELOPE");
    if (!sent || size < 2 || (env && strcmp(env, "auto")) || getenv("NCCLMPI_P2P_ENVELOPE_MIN") || getenv("NCCLMPI_FORCE_STAGED"))
        return;
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0) != cudaSuccess) mps = 0;
    const int k = size > ndev && !mps ? (size + ndev - 1) / ndev : 1;
    const int min = k > 1 ? k * 512 * 1024 : 8192;
    const int big = 8 << 20, next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const int sizes[3] = {big, min - 4, min};  /* bytes (ints: /4) */
    int *s = dev_ints(big / 4, rank * 7), *r = dev_ints(big / 4, -1);
    for (int c = 0; c < 3; c++) {
        const int n = sizes[c] / 4;
        CUDACHECK(cudaMemset(r, 0xAB, big));
        const unsigned long long before = sent();
        MPI_Request q[2];
        MPI_Irecv(r, n, MPI_INT, prev, 40 + c, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(s, n, MPI_INT, next, 40 + c, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        check_dev_ints(r, n, prev * 7, "envelope sizes");
        const int went = (int)(sent() - before);
        int any = 0;
        MPI_Allreduce(&went, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (c == 0 && !any) {
            if (rank == 0) printf("gpu_misc: envelopes are off for this job; sizes not checked\n");
            break;
        }
        const int want = c == 1 ? 0 : 1;
        CHECK(went == want, "%d-byte device message with %d rank(s) per GPU (MPS %d): %d envelope(s), want %d", sizes[c], k,
              mps, went, want);
    }
    if (rank == 0) printf("gpu_misc: envelopes from %d bytes (%d rank(s) per GPU, MPS %d)\n", min, k, mps);
    cudaFree(s);
    cudaFree(r);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndev;
    int distinct = gpu_select(&ndev);
    /* give MPI_COMM_WORLD its NCCL comm first, so the lifecycle comms are derived by split */
    float *w;
    CUDACHECK(cudaMalloc((void **)&w, 64));
    CUDACHECK(cudaMemset(w, 0, 64));
    MPI_Allreduce(MPI_IN_PLACE, w, 16, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    cudaFree(w);
    test_p2p();
    test_memory_kinds(distinct);
    const char *agree = getenv("NCCLMPI_AGREE");
    if (agree && agree[0] == '1') test_mixed();
    test_errors(ndev);
    test_lifecycle();
    test_large();
    test_envelope_sizes(ndev);
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("gpu_misc: %d ranks, %d GPU(s): %d failure(s)\n", size, ndev, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
