/* local_staged: the local calls ncclmpi stages on device buffers (MPI_Reduce_local, MPI_Pack,
 * MPI_Unpack and their _external forms, the MPI-IO data calls: blocking, nonblocking, collective,
 * split collective, individual and shared file pointers) give the bytes the real MPI gives on host
 * copies of the same data. Device buffers are poisoned first; a buffer the call writes only in
 * part (a datatype's gaps, packing space past the position, a short read at the end of the file)
 * must keep its other bytes. Each device call must be counted on the staged route.
 *
 * Built twice: -DNM_GPU_TEST (cudaMalloc memory, gpu label) and -DNM_STAND_IN_TEST (memory of the
 * stand-in CUDA driver, test/unit/local_staged.sh: no GPU needed). 1 to 4 ranks. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>

#if defined(NM_GPU_TEST)
#include <cuda_runtime.h>
static void *dev_new(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    return p;
}
static void put(void *dst, const void *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice); }
static void get(void *dst, const void *src, size_t n) { cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost); }
static int dev_init(int rank)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) return 0;
    cudaSetDevice(rank % ndev);
    return 1;
}
#else /* NM_STAND_IN_TEST: the stand-in driver's device memory is host memory it tracks */
#include "../unit/stand_in.h"
enum { NBUF = 16 };
static CUdeviceptr bufs[NBUF];
static int nbufs;
static void *driver;  /* the stand-in's handle (its failure injection) */
static void *dev_new(size_t n)
{
    if (nbufs == NBUF || n > 65536) MPI_Abort(MPI_COMM_WORLD, 2);
    return (void *)(uintptr_t)bufs[nbufs++];
}
static void put(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void get(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static int dev_init(int rank)
{
    (void)rank;
    return (driver = stand_in_driver("local_staged", NBUF, 65536, bufs)) != NULL;
}
#endif

enum { N = 1000 };
static int rank, size, failures;
static int (*route_calls)(const char *, int, unsigned long long *);

#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            failures++;                                                                            \
            fprintf(stderr, "local_staged rank %d line %d: ", rank, __LINE__);                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static unsigned long long staged(const char *fn)
{
    unsigned long long n = 0;
    route_calls(fn, 2 /* NCCLMPI_ROUTE_STAGED */, &n);
    return n;
}
/* STAGED(fn, args): MPI_fn(args) succeeds and is counted on the staged route */
#define STAGED(fn, ...)                                                                            \
    do {                                                                                           \
        unsigned long long b_ = staged(#fn);                                                       \
        int rc_ = MPI_##fn(__VA_ARGS__);                                                           \
        CHECK(rc_ == MPI_SUCCESS, "MPI_" #fn ": rc %d", rc_);                                      \
        CHECK(staged(#fn) == b_ + 1, "MPI_" #fn ": not counted on the staged route");              \
    } while (0)

/* device buffer of n bytes, poisoned, and its host twin, poisoned alike */
static void *dpoison(size_t n, unsigned char *host)
{
    void *d = dev_new(n);
    memset(host, 0x5a, n);
    put(d, host, n);
    return d;
}
static void dcheck(const void *d, const unsigned char *want, size_t n, const char *what)
{
    unsigned char *h = malloc(n);
    get(h, d, n);
    size_t i = 0;
    while (i < n && h[i] == want[i]) i++;
    CHECK(i == n, "%s: byte %zu of %zu is 0x%02x, the real MPI on host memory gives 0x%02x", what, i, n, i < n ? h[i] : 0,
          i < n ? want[i] : 0);
    free(h);
}

static void t_reduce_local(void)
{
    int a[N], b[N], ref[N];
    for (int i = 0; i < N; i++) a[i] = rank * 7 + i, b[i] = 3 * i - rank;
    void *da = dev_new(sizeof(a)), *db = dev_new(sizeof(b));
    put(da, a, sizeof(a));
    put(db, b, sizeof(b));
    memcpy(ref, b, sizeof(b));
    MPI_Reduce_local(a, ref, N, MPI_INT, MPI_SUM);
    STAGED(Reduce_local, da, db, N, MPI_INT, MPI_SUM);
    dcheck(db, (unsigned char *)ref, sizeof(ref), "Reduce_local device/device");
    /* host in, device inout; device in, host inout */
    put(db, b, sizeof(b));
    memcpy(ref, b, sizeof(b));
    MPI_Reduce_local(a, ref, N, MPI_INT, MPI_MAX);
    STAGED(Reduce_local, a, db, N, MPI_INT, MPI_MAX);
    dcheck(db, (unsigned char *)ref, sizeof(ref), "Reduce_local host/device");
    int hb[N];
    memcpy(hb, b, sizeof(b));
    memcpy(ref, b, sizeof(b));
    MPI_Reduce_local(a, ref, N, MPI_INT, MPI_BXOR);
    STAGED(Reduce_local, da, hb, N, MPI_INT, MPI_BXOR);
    CHECK(!memcmp(hb, ref, sizeof(ref)), "Reduce_local device/host: wrong result");
}

static void t_pack(void)
{
    int v[2 * N];
    for (int i = 0; i < 2 * N; i++) v[i] = 1000 * rank + i;
    MPI_Datatype every_other;
    MPI_Type_vector(N, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    void *dv = dev_new(sizeof(v));
    put(dv, v, sizeof(v));
    /* a header int packed from host memory first, then the device data after it */
    const int out = 8 * N;
    unsigned char ref[8 * N], hout[8 * N];
    void *dout = dpoison(out, hout);
    memset(ref, 0x5a, sizeof(ref));
    int hdr = 42 + rank, pos_ref = 0, pos = 0;
    MPI_Pack(&hdr, 1, MPI_INT, ref, out, &pos_ref, MPI_COMM_WORLD);
    MPI_Pack(v, 1, every_other, ref, out, &pos_ref, MPI_COMM_WORLD);
    STAGED(Pack, &hdr, 1, MPI_INT, dout, out, &pos, MPI_COMM_WORLD);
    STAGED(Pack, dv, 1, every_other, dout, out, &pos, MPI_COMM_WORLD);
    CHECK(pos == pos_ref, "Pack: position %d, expected %d", pos, pos_ref);
    dcheck(dout, ref, out, "Pack into device memory");
    /* unpack from device memory into a device buffer with gaps (the gaps keep their bytes) */
    unsigned char href[sizeof(v)], hdst[sizeof(v)];
    void *ddst = dpoison(sizeof(v), hdst);
    memset(href, 0x5a, sizeof(href));
    int h2 = 0, p_ref = 0, p = 0;
    MPI_Unpack(ref, out, &p_ref, &h2, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(ref, out, &p_ref, href, 1, every_other, MPI_COMM_WORLD);
    int dh2 = -1;
    STAGED(Unpack, dout, out, &p, &dh2, 1, MPI_INT, MPI_COMM_WORLD);
    STAGED(Unpack, dout, out, &p, ddst, 1, every_other, MPI_COMM_WORLD);
    CHECK(p == p_ref && dh2 == h2 && h2 == 42 + rank, "Unpack: position %d (expected %d), header %d", p, p_ref, dh2);
    dcheck(ddst, href, sizeof(v), "Unpack into device memory with gaps");
    /* external32 */
    MPI_Aint e_ref = 0, e = 0, esz = 0;
    MPI_Pack_external_size("external32", 1, every_other, &esz);
    unsigned char eref[4 * N + 64], heout[4 * N + 64];
    void *deout = dpoison(sizeof(heout), heout);
    memset(eref, 0x5a, sizeof(eref));
    MPI_Pack_external("external32", v, 1, every_other, eref, sizeof(eref), &e_ref);
    STAGED(Pack_external, "external32", dv, 1, every_other, deout, sizeof(heout), &e);
    CHECK(e == e_ref && e == esz, "Pack_external: position %ld, expected %ld", (long)e, (long)e_ref);
    dcheck(deout, eref, sizeof(eref), "Pack_external into device memory");
    void *dback = dpoison(sizeof(v), hdst);
    memset(href, 0x5a, sizeof(href));
    e_ref = e = 0;
    MPI_Unpack_external("external32", eref, sizeof(eref), &e_ref, href, 1, every_other);
    STAGED(Unpack_external, "external32", deout, sizeof(heout), &e, dback, 1, every_other);
    CHECK(e == e_ref, "Unpack_external: position %ld, expected %ld", (long)e, (long)e_ref);
    dcheck(dback, href, sizeof(v), "Unpack_external into device memory");
    /* MPI_BOTTOM with absolute addresses in device memory */
    MPI_Aint at;
    int bl = N;
    MPI_Datatype abs_dev;
    MPI_Get_address(dv, &at);
    MPI_Type_create_hindexed(1, &bl, &at, MPI_INT, &abs_dev);
    MPI_Type_commit(&abs_dev);
    memset(ref, 0x5a, sizeof(ref));
    memset(hout, 0x5a, sizeof(hout));
    put(dout, hout, out);
    pos_ref = pos = 0;
    MPI_Pack(v, N, MPI_INT, ref, out, &pos_ref, MPI_COMM_WORLD);
    STAGED(Pack, MPI_BOTTOM, 1, abs_dev, dout, out, &pos, MPI_COMM_WORLD);
    CHECK(pos == pos_ref, "Pack from MPI_BOTTOM: position %d, expected %d", pos, pos_ref);
    dcheck(dout, ref, out, "Pack from MPI_BOTTOM (device addresses)");
    MPI_Type_free(&abs_dev);
    MPI_Type_free(&every_other);
}

#ifdef NM_STAND_IN_TEST
/* rc must be ncclmpi's error for MPI function fn */
static void expect_failed(const char *fn, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "", want[128];
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
    snprintf(want, sizeof(want), "ncclmpi: MPI_%s: ", fn);
    CHECK(rc != MPI_SUCCESS && !strncmp(msg, want, strlen(want)), "MPI_%s with a failing copy: rc %d \"%s\"", fn, rc, msg);
}

static void file_has(MPI_File fh, MPI_Offset at, const int *vals, int n, const char *what);

/* Rank 0 cannot stage (every copy of the stand-in fails): it reports the error, and in a collective
 * file call it still takes part with nothing to write, so the other ranks' calls complete. */
static void t_io_failed(MPI_File fh, MPI_Offset off, void *dw)
{
    int *fail = (int *)dlsym(driver, "fake_cuda_fail_copies");
    CHECK(fail != NULL, "the stand-in driver has no fake_cuda_fail_copies");
    if (!fail) return;
    int v[N], old[N];
    MPI_Status st;
    MPI_Request q;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_read_at(fh, off, old, N, MPI_INT, &st);  /* what rank 0's block holds: it stays */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) v[i] = 99 * i + rank + 1;
    put(dw, v, sizeof(v));
    *fail = rank == 0;
    int rc = MPI_File_write_at_all(fh, off, dw, N, MPI_INT, &st);
    *fail = 0;
    if (rank == 0) expect_failed("File_write_at_all", rc);
    else CHECK(rc == MPI_SUCCESS, "File_write_at_all beside a failing rank: rc %d", rc);
    *fail = rank == 0;
    rc = MPI_File_iwrite_at_all(fh, off, dw, N, MPI_INT, &q);
    *fail = 0;
    if (rank == 0) expect_failed("File_iwrite_at_all", rc);
    MPI_Wait(&q, &st);
    *fail = rank == 0;
    rc = MPI_File_write_at_all_begin(fh, off, dw, N, MPI_INT);
    *fail = 0;
    if (rank == 0) expect_failed("File_write_at_all_begin", rc);
    rc = MPI_File_write_at_all_end(fh, dw, &st);
    CHECK(rc == MPI_SUCCESS, "File_write_at_all_end after a failed begin: rc %d", rc);
    MPI_Barrier(MPI_COMM_WORLD);
    file_has(fh, off / (MPI_Offset)sizeof(int), rank == 0 ? old : v, N, "after collective writes with rank 0 failing");
    MPI_Barrier(MPI_COMM_WORLD);
}
#endif

/* expect the file's ints [at, at + n) to hold vals (read back through host memory) */
static void file_has(MPI_File fh, MPI_Offset at, const int *vals, int n, const char *what)
{
    int *h = malloc(n * sizeof(int));
    MPI_Status st;
    MPI_File_read_at(fh, at * (MPI_Offset)sizeof(int), h, n, MPI_INT, &st);
    int i = 0;
    while (i < n && h[i] == vals[i]) i++;
    CHECK(i == n, "%s: file int %lld is %d, expected %d", what, (long long)(at + i), i < n ? h[i] : 0, i < n ? vals[i] : 0);
    free(h);
}

/* A file of every rank's in TMPDIR, deleted when closed: 1 when it opened */
static int scratch_file(const char *tag, MPI_File *fh)
{
    char path[512] = "";
    if (rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/ncclmpi_%s.%d.dat", tmp && *tmp ? tmp : "/tmp", tag, (int)getpid());
    }
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL, fh);
    CHECK(rc == MPI_SUCCESS, "cannot open %s", path);
    return rc == MPI_SUCCESS;
}

static void t_io(void)
{
    MPI_File fh;
    if (!scratch_file("local_staged", &fh)) return;
    const MPI_Offset mine = (MPI_Offset)rank * N;  /* this rank's ints in the file */
    int v[N], got[N];
    unsigned char hd[sizeof(v)];
    void *dw = dev_new(sizeof(v)), *dr = dpoison(sizeof(v), hd);
    MPI_Status st;
    MPI_Request q;
    int cnt = -1;
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < N; i++) v[i] = round * 1000003 + rank * 10007 + i;
        put(dw, v, sizeof(v));
        memset(hd, 0x5a, sizeof(hd));
        put(dr, hd, sizeof(hd));
        const MPI_Offset off = mine * (MPI_Offset)sizeof(int);
        switch (round) {
        case 0:
            STAGED(File_write_at, fh, off, dw, N, MPI_INT, &st);
            MPI_Barrier(MPI_COMM_WORLD);
            STAGED(File_read_at, fh, off, dr, N, MPI_INT, &st);
            break;
        case 1:
            STAGED(File_write_at_all, fh, off, dw, N, MPI_INT, &st);
            STAGED(File_read_at_all, fh, off, dr, N, MPI_INT, &st);
            break;
        case 2:
            STAGED(File_iwrite_at, fh, off, dw, N, MPI_INT, &q);
            MPI_Wait(&q, &st);
            MPI_Barrier(MPI_COMM_WORLD);
            STAGED(File_iread_at, fh, off, dr, N, MPI_INT, &q);
            MPI_Wait(&q, &st);
            break;
        case 3:
            STAGED(File_iwrite_at_all, fh, off, dw, N, MPI_INT, &q);
            MPI_Wait(&q, &st);
            STAGED(File_iread_at_all, fh, off, dr, N, MPI_INT, &q);
            MPI_Wait(&q, &st);
            break;
        case 4:
            STAGED(File_write_at_all_begin, fh, off, dw, N, MPI_INT);
            STAGED(File_write_at_all_end, fh, dw, &st);
            STAGED(File_read_at_all_begin, fh, off, dr, N, MPI_INT);
            STAGED(File_read_at_all_end, fh, dr, &st);
            break;
        case 5:  /* the individual file pointer */
            MPI_File_seek(fh, off, MPI_SEEK_SET);
            STAGED(File_write_all, fh, dw, N, MPI_INT, &st);
            MPI_File_seek(fh, off, MPI_SEEK_SET);
            STAGED(File_read_all, fh, dr, N, MPI_INT, &st);
            break;
        }
        MPI_Get_count(&st, MPI_INT, &cnt);
        CHECK(cnt == N, "round %d: the read's status counts %d ints", round, cnt);
        get(got, dr, sizeof(got));
        int at = 0;
        while (at < N && got[at] == v[at]) at++;
        CHECK(at == N, "round %d: read back into device memory differs at int %d: %d, expected %d", round, at,
              at < N ? got[at] : 0, at < N ? v[at] : 0);
        MPI_Barrier(MPI_COMM_WORLD);
        file_has(fh, mine, v, N, "written from device memory");
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* a short read at the end of the file (the last rank's region + 100 ints): the status counts
     * what was read, the rest of the buffer keeps its bytes */
    if (rank == size - 1) {
        int want[N];
        memset(want, 0x5a, sizeof(want));
        memset(hd, 0x5a, sizeof(hd));
        put(dr, hd, sizeof(hd));
        STAGED(File_read_at, fh, (mine + 100) * (MPI_Offset)sizeof(int), dr, N, MPI_INT, &st);
        MPI_Get_count(&st, MPI_INT, &cnt);
        CHECK(cnt == N - 100, "short read: status counts %d ints, expected %d", cnt, N - 100);
        get(got, dr, sizeof(got));
        memcpy(want, v + 100, (N - 100) * sizeof(int));
        CHECK(!memcmp(got, want, sizeof(want)), "short read: the buffer past the end of the file changed");
        /* the same with the status ignored (not nonblocking: Open MPI 4.1's MPI_File_iread_at past
         * the end of the file never completes, on host memory too) */
        put(dr, hd, sizeof(hd));
        STAGED(File_read_at, fh, (mine + 100) * (MPI_Offset)sizeof(int), dr, N, MPI_INT, MPI_STATUS_IGNORE);
        get(got, dr, sizeof(got));
        CHECK(!memcmp(got, want, sizeof(want)), "short read, status ignored: wrong bytes");
    }
    /* a split collective read with its status ignored */
    memset(hd, 0x5a, sizeof(hd));
    put(dr, hd, sizeof(hd));
    STAGED(File_read_at_all_begin, fh, mine * (MPI_Offset)sizeof(int), dr, N, MPI_INT);
    STAGED(File_read_at_all_end, fh, dr, MPI_STATUS_IGNORE);
    get(got, dr, sizeof(got));
    CHECK(!memcmp(got, v, sizeof(v)), "split collective read, status ignored: wrong bytes");
    /* a read into a datatype with gaps: the gaps keep their bytes */
    MPI_Datatype every_other;
    MPI_Type_vector(N / 2, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    memset(hd, 0x5a, sizeof(hd));
    put(dr, hd, sizeof(hd));
    STAGED(File_read_at, fh, mine * (MPI_Offset)sizeof(int), dr, 1, every_other, &st);
    int want[N];
    memset(want, 0x5a, sizeof(want));
    for (int i = 0; i < N / 2; i++) want[2 * i] = v[i];
    get(got, dr, sizeof(got));
    CHECK(!memcmp(got, want, sizeof(want)), "read into a vector type: wrong bytes (gaps must stay)");
    MPI_Type_free(&every_other);
    /* the shared file pointer, in rank order */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
    for (int i = 0; i < N; i++) v[i] = -(rank * 10007 + i);
    put(dw, v, sizeof(v));
    STAGED(File_write_ordered, fh, dw, N, MPI_INT, &st);
    MPI_Barrier(MPI_COMM_WORLD);
    file_has(fh, mine, v, N, "write_ordered from device memory");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
    memset(hd, 0x5a, sizeof(hd));
    put(dr, hd, sizeof(hd));
    STAGED(File_read_ordered, fh, dr, N, MPI_INT, &st);
    get(got, dr, sizeof(got));
    CHECK(!memcmp(got, v, sizeof(v)), "read_ordered into device memory differs");
    /* a collective write in which only the even ranks use device memory, read back the other way
     * round; two nonblocking writes completed by MPI_Testall with a host request among them (a
     * freed one could not be tested: only a completed write may precede MPI_File_sync or close) */
    MPI_Barrier(MPI_COMM_WORLD);
    int hv[N];
    for (int i = 0; i < N; i++) v[i] = 7 * rank + 3 * i, hv[i] = v[i];
    put(dw, v, sizeof(v));
    const MPI_Offset off = mine * (MPI_Offset)sizeof(int);
    if (rank % 2 == 0) STAGED(File_write_at_all, fh, off, dw, N, MPI_INT, &st);
    else MPI_File_write_at_all(fh, off, hv, N, MPI_INT, &st);
    memset(hd, 0x5a, sizeof(hd));
    put(dr, hd, sizeof(hd));
    memset(got, 0, sizeof(got));
    if (rank % 2 == 1) STAGED(File_read_at_all, fh, off, dr, N, MPI_INT, &st);
    else MPI_File_read_at_all(fh, off, got, N, MPI_INT, &st);
    if (rank % 2 == 1) get(got, dr, sizeof(got));
    CHECK(!memcmp(got, v, sizeof(v)), "collective write/read with device memory on some ranks: wrong data");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request qs[3];
    int token = rank, peer_token = -1, done = 0;
    for (int i = 0; i < N; i++) v[i] = -3 * i - rank;
    put(dw, v, sizeof(v));
    STAGED(File_iwrite_at, fh, off, dw, N / 2, MPI_INT, &qs[0]);
    STAGED(File_iwrite_at, fh, off + (MPI_Offset)(N / 2 * sizeof(int)), (int *)dw + N / 2, N - N / 2, MPI_INT, &qs[1]);
    MPI_Irecv(&peer_token, 1, MPI_INT, (rank + size - 1) % size, 5, MPI_COMM_WORLD, &qs[2]);
    MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 5, MPI_COMM_WORLD);
    while (!done) MPI_Testall(3, qs, &done, MPI_STATUSES_IGNORE);
    CHECK(peer_token == (rank + size - 1) % size, "Testall: the host message got %d", peer_token);
    MPI_Barrier(MPI_COMM_WORLD);
    file_has(fh, mine, v, N, "two nonblocking writes from device memory completed by MPI_Testall");
    MPI_Barrier(MPI_COMM_WORLD);
#ifdef NM_STAND_IN_TEST
    t_io_failed(fh, off, dw);
#endif
    MPI_File_close(&fh);
}

#ifdef NM_TEST_FORTRAN
/* The Fortran entry points of the same calls (ncclmpi's, found by name; the program links Open
 * MPI's Fortran library, to which they forward): handles, requests and the split collective's end
 * go through their conversions. */
typedef void (*f_reduce_local_t)(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_iread_at_t)(MPI_Fint *, MPI_Offset *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_wait_t)(MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_begin_t)(MPI_Fint *, MPI_Offset *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*f_end_t)(MPI_Fint *, void *, MPI_Fint *, MPI_Fint *);
static void *fsym(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    CHECK(f != NULL, "no Fortran entry point %s", name);
    return f;
}
static void t_fortran(void)
{
    f_reduce_local_t reduce_local = (f_reduce_local_t)fsym("mpi_reduce_local_");
    f_iread_at_t iread_at = (f_iread_at_t)fsym("mpi_file_iread_at_");
    f_wait_t wait = (f_wait_t)fsym("mpi_wait_");
    f_begin_t wbegin = (f_begin_t)fsym("mpi_file_write_at_all_begin_");
    f_end_t wend = (f_end_t)fsym("mpi_file_write_at_all_end_");
    if (!reduce_local || !iread_at || !wait || !wbegin || !wend) return;
    int a[N], b[N], ref[N];
    for (int i = 0; i < N; i++) a[i] = 5 * i + rank, b[i] = i * i;
    void *da = dev_new(sizeof(a)), *db = dev_new(sizeof(b));
    put(da, a, sizeof(a));
    put(db, b, sizeof(b));
    memcpy(ref, b, sizeof(b));
    MPI_Reduce_local(a, ref, N, MPI_INT, MPI_SUM);
    MPI_Fint n = N, fint = MPI_Type_c2f(MPI_INT), fsum = MPI_Op_c2f(MPI_SUM), ierr = -1;
    unsigned long long before = staged("Reduce_local");
    reduce_local(da, db, &n, &fint, &fsum, &ierr);
    CHECK(ierr == MPI_SUCCESS && staged("Reduce_local") == before + 1, "mpi_reduce_local_: ierr %d, staged %llu",
          (int)ierr, staged("Reduce_local") - before);
    dcheck(db, (unsigned char *)ref, sizeof(ref), "mpi_reduce_local_ on device memory");
    /* a split collective write from device memory, read back with a nonblocking read */
    MPI_File fh;
    if (!scratch_file("local_staged_f", &fh)) return;
    MPI_Fint ffh = MPI_File_c2f(fh), st[sizeof(MPI_Status) / sizeof(MPI_Fint) + 1], req = -1;
    MPI_Offset off = (MPI_Offset)rank * N * sizeof(int);
    ierr = -1;
    wbegin(&ffh, &off, da, &n, &fint, &ierr);
    CHECK(ierr == MPI_SUCCESS, "mpi_file_write_at_all_begin_: ierr %d", (int)ierr);
    ierr = -1;
    wend(&ffh, da, st, &ierr);
    CHECK(ierr == MPI_SUCCESS, "mpi_file_write_at_all_end_: ierr %d", (int)ierr);
    MPI_Barrier(MPI_COMM_WORLD);
    file_has(fh, (MPI_Offset)rank * N, a, N, "mpi_file_write_at_all_begin_/end_ from device memory");
    unsigned char hd[sizeof(a)];
    void *dr = dpoison(sizeof(a), hd);
    ierr = -1;
    iread_at(&ffh, &off, dr, &n, &fint, &req, &ierr);
    CHECK(ierr == MPI_SUCCESS, "mpi_file_iread_at_: ierr %d", (int)ierr);
    ierr = -1;
    wait(&req, st, &ierr);
    CHECK(ierr == MPI_SUCCESS && MPI_Request_f2c(req) == MPI_REQUEST_NULL, "mpi_wait_: ierr %d", (int)ierr);
    dcheck(dr, (unsigned char *)a, sizeof(a), "mpi_file_iread_at_ into device memory");
    MPI_File_close(&fh);
}
#endif

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    route_calls = (int (*)(const char *, int, unsigned long long *))dlsym(RTLD_DEFAULT, "ncclmpi_get_route_calls");
    if (!dev_init(rank) || !route_calls) {
        if (rank == 0) printf("local_staged: skipped (%s)\n", route_calls ? "no GPU" : "ncclmpi not loaded");
        MPI_Finalize();
        return 77;
    }
    t_reduce_local();
    t_pack();
    t_io();
#ifdef NM_TEST_FORTRAN
    t_fortran();
#endif
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("local_staged: %s (%d failures)\n", all ? "FAILED" : "ok", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
