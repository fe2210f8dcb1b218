/* A one-rank stand-in for libnccl.so.2 (bench/device_overhead.sh): with the stand-in driver
 * (fake_cuda.c) it lets ncclmpi's NCCL route run on a machine without a GPU, so that callgrind can
 * count the host instructions the layer itself spends per device-buffer call, and lets tests run
 * communicators of one rank on the NCCL route. Every collective of one rank is a copy from the
 * send to the receive buffer, a send to itself a copy into its receive; more than one rank is
 * refused (ncclmpi then takes the staged path). Not a model of NCCL. */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct ncclComm { int nranks; };

static size_t tsize(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static ncclResult_t copy(const void *s, void *r, size_t n, ncclDataType_t t)
{
    if (s != r && n) memmove(r, s, n * tsize(t));
    return ncclSuccess;
}
static ncclResult_t make(ncclComm_t *c, int nranks)
{
    if (nranks != 1) return ncclInvalidUsage;
    *c = calloc(1, sizeof(struct ncclComm));
    (*c)->nranks = 1;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetVersion(int *v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { memset(id, 7, sizeof(*id)); return ncclSuccess; }
EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int r) { (void)id; (void)r; return make(c, n); }
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int n, ncclUniqueId id, int r, ncclConfig_t *cfg)
{
    (void)id; (void)r; (void)cfg;
    return make(c, n);
}
EXPORT ncclResult_t ncclCommSplit(ncclComm_t p, int color, int key, ncclComm_t *c, ncclConfig_t *cfg)
{
    (void)p; (void)color; (void)key; (void)cfg;
    return make(c, 1);
}
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { free(c); return ncclSuccess; }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { free(c); return ncclSuccess; }
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) { (void)c; *e = ncclSuccess; return ncclSuccess; }
EXPORT const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "stand-in NCCL error"; }
EXPORT const char *ncclGetLastError(ncclComm_t c) { (void)c; return ""; }
EXPORT ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
EXPORT ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
    (void)op; (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st)
{
    (void)op; (void)root; (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    (void)root; (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
    (void)op; (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    (void)root; (void)c; (void)st;
    return copy(s, r, n, t);
}
EXPORT ncclResult_t ncclScatter(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    (void)root; (void)c; (void)st;
    return copy(s, r, n, t);
}
/* one rank: a send to itself meets its receive (in call order, within or across groups: the
 * stand-in has no streams to order them by) */
#define PEND 64
static struct { const void *s; void *r; size_t bytes; } sends[PEND], recvs[PEND];
static int nsends, nrecvs;
static ncclResult_t meet(void)
{
    while (nsends && nrecvs) {
        if (sends[0].bytes != recvs[0].bytes) return ncclInvalidUsage;
        if (sends[0].bytes && sends[0].s != recvs[0].r) memmove(recvs[0].r, sends[0].s, sends[0].bytes);
        memmove(sends, sends + 1, --nsends * sizeof(sends[0]));
        memmove(recvs, recvs + 1, --nrecvs * sizeof(recvs[0]));
    }
    return ncclSuccess;
}
EXPORT ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    (void)c; (void)st;
    if (peer != 0 || nsends == PEND) return ncclInvalidUsage;
    sends[nsends].s = s;
    sends[nsends++].bytes = n * tsize(t);
    return meet();
}
EXPORT ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    (void)c; (void)st;
    if (peer != 0 || nrecvs == PEND) return ncclInvalidUsage;
    recvs[nrecvs].r = r;
    recvs[nrecvs++].bytes = n * tsize(t);
    return meet();
}
