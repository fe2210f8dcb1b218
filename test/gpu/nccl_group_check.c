/* nccl_group_check: raw NCCL alone (no ncclmpi), one group of mixed allreduces per round, every
 * result compared with a float64 host reference. It tells whether NCCL itself computes right in
 * the arrangement a test run uses, before ncclmpi's tests are read: tools/gpu_check.sh virtual
 * runs it with the ranks of one GPU taken as hosts of their own (an NCCL_HOSTID per rank).
 *   mpirun -np N nccl_group_check [ROUNDS] [--nogroup] [--k K] [--types LIST] [--ops LIST]
 *   (exit 0: every element right; 1: some wrong; 2: bad arguments)
 * --nogroup: the same calls one by one, outside a group (whether a wrong result needs the group)
 * --k K: K allreduces per round (1..64, default 64); --types/--ops: draw only from these
 * (comma-separated: uint8,int32,int64,float64 and sum,max,min), to narrow down what a wrong
 * result needs. A run with wrong elements prints them by type and op.
 * Each round: 64 in-place ncclAllReduce of uint8/int32/int64/float64 with sum/max/min (no sums of
 * bytes: they wrap), 1 to 20000 elements, in one ncclGroupStart/End, drawn from a seed every rank
 * shares; element j of op k on rank q is (7k + 3j + 11q) mod 53 + 1 (halved for float64), so
 * sums over up to 8 ranks are exact in every type. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KMAX = 64 };
static const ncclDataType_t types[] = {ncclUint8, ncclInt32, ncclInt64, ncclFloat64};
static const char *const tnames[] = {"uint8", "int32", "int64", "float64"};
static const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclMin};
static const char *const onames[] = {"sum", "max", "min"};
static const size_t counts[] = {1, 100, 4096, 8192, 16385, 20000};

// a comma-separated LIST of names from NAMES[N] as a bit mask (0: a name not among them)
static unsigned pick(const char *list, const char *const *names, int n)
{
    unsigned m = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int i = 0;
        while (i < n && strcmp(tok, names[i])) i++;
        if (i == n) return 0;
        m |= 1u << i;
    }
    return m;
}

static size_t tsize(int t) { return t == 0 ? 1 : t == 1 ? 4 : 8; }
static double val(int k, size_t j, int q) { return (double)((7 * k + 3 * (long)j + 11 * q) % 53 + 1); }

static void put(void *p, int t, size_t j, double v)
{
    switch (t) {
    case 0: ((unsigned char *)p)[j] = (unsigned char)v; break;
    case 1: ((int *)p)[j] = (int)v; break;
    case 2: ((long long *)p)[j] = (long long)v; break;
    default: ((double *)p)[j] = v / 2;
    }
}

static double get(const void *p, int t, size_t j)
{
    switch (t) {
    case 0: return ((const unsigned char *)p)[j];
    case 1: return ((const int *)p)[j];
    case 2: return (double)((const long long *)p)[j];
    default: return ((const double *)p)[j] * 2;
    }
}

static unsigned next(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

#define CK(x, what)                                                              \
    do {                                                                         \
        if ((x) != 0) {                                                          \
            fprintf(stderr, "nccl_group_check: %s failed\n", what);              \
            MPI_Abort(MPI_COMM_WORLD, 2);                                        \
        }                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, ndev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = 3, grouped = 1, K = KMAX;
    unsigned tmask = 0xf, omask = 0x7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--nogroup")) grouped = 0;
        else if (!strcmp(a, "--k") && ++i) K = atoi(v);
        else if (!strcmp(a, "--types") && ++i) tmask = pick(v, tnames, 4);
        else if (!strcmp(a, "--ops") && ++i) omask = pick(v, onames, 3);
        else rounds = atoi(a);
    }
    // (no sums of bytes: they wrap)
    if (rounds < 1 || K < 1 || K > KMAX || !tmask || !omask || (tmask == 1 && omask == 1)) {
        if (rank == 0) fprintf(stderr, "nccl_group_check: bad arguments\n");
        MPI_Finalize();
        return 2;
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (rank == 0) printf("nccl_group_check: no GPU\n");
        MPI_Finalize();
        return 77;
    }
    MPI_Comm node;
    int lrank;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lrank);
    MPI_Comm_free(&node);
    CK(cudaSetDevice(lrank % ndev), "cudaSetDevice");
    ncclUniqueId id;
    if (rank == 0) CK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    CK(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    long wrong = 0, checked = 0, by[4][3] = {{0}}, ops_by[4][3] = {{0}}, bad_by[4][3] = {{0}};
    int t[KMAX], o[KMAX];
    size_t n[KMAX];
    void *d[KMAX];
    for (int r = 0; r < rounds; r++) {
        unsigned seed = 1234u + 77u * (unsigned)r;  // the same on every rank
        for (int k = 0; k < K; k++) {
            do {
                t[k] = (int)(next(&seed) % 4);
                o[k] = (int)(next(&seed) % 3);
                if (t[k] == 0 && o[k] == 0) o[k] = 1;
            } while (!(tmask >> t[k] & 1) || !(omask >> o[k] & 1));
            n[k] = counts[next(&seed) % (sizeof(counts) / sizeof(counts[0]))];
            const size_t bytes = n[k] * tsize(t[k]);
            void *h = malloc(bytes);
            for (size_t j = 0; j < n[k]; j++) put(h, t[k], j, val(k, j, rank));
            CK(cudaMalloc(&d[k], bytes), "cudaMalloc");
            CK(cudaMemcpy(d[k], h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
            free(h);
        }
        if (grouped) CK(ncclGroupStart(), "ncclGroupStart");
        for (int k = 0; k < K; k++) CK(ncclAllReduce(d[k], d[k], n[k], types[t[k]], ops[o[k]], comm, s), "ncclAllReduce");
        if (grouped) CK(ncclGroupEnd(), "ncclGroupEnd");
        CK(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        for (int k = 0; k < K; k++) {
            const size_t bytes = n[k] * tsize(t[k]);
            void *h = malloc(bytes);
            CK(cudaMemcpy(h, d[k], bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
            int shown = 0;
            ops_by[t[k]][o[k]]++;
            for (size_t j = 0; j < n[k]; j++) {
                double want = val(k, j, 0);
                for (int q = 1; q < size; q++) {
                    const double v = val(k, j, q);
                    want = o[k] == 0 ? want + v : o[k] == 1 ? (v > want ? v : want) : (v < want ? v : want);
                }
                const double got = get(h, t[k], j);
                checked++;
                if (got != want) {
                    wrong++;
                    by[t[k]][o[k]]++;
                    if (!shown++ && rank == 0)
                        printf("nccl_group_check: round %d op %d (%s %s x %zu): element %zu is %g, expected %g\n", r, k,
                               tnames[t[k]], onames[o[k]], n[k], j, got, want);
                }
            }
            if (shown) bad_by[t[k]][o[k]]++;
            free(h);
            CK(cudaFree(d[k]), "cudaFree");
        }
    }
    long all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, by, 12, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, bad_by, 12, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && all)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 3; b++)
                if (ops_by[a][b])
                    printf("nccl_group_check:   %s %s: %ld of %ld operation(s) wrong, %ld element(s)\n", tnames[a],
                           onames[b], bad_by[a][b], ops_by[a][b], by[a][b]);
    if (rank == 0)
        printf("nccl_group_check: %d ranks, %d rounds of %d allreduces %s: %ld wrong element(s) of %ld on the worst rank%s\n",
               size, rounds, K, grouped ? "in one group" : "one by one", all, checked, all ? "" : ": ok");
    ncclCommDestroy(comm);
    MPI_Finalize();
    return all != 0;
}
