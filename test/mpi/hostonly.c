/* A host-only program with ncclmpi preloaded (or linked) never maps NCCL or CUDA: after
 * collectives, nonblocking collectives, point-to-point and communicator creation, and again
 * after MPI_Finalize, /proc/self/maps has libncclmpi and no libnccl / libcuda / libcudart,
 * ncclmpi_nccl_loaded() says 0, and every call went to the host. Run with
 * --ncclmpi=require only (it checks that libncclmpi is there). */
#include "common.h"

static int mapped(const char *prefix, const char *except, char *which, size_t n)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) {
        char *path = strchr(line, '/');
        if (!path) continue;
        path[strcspn(path, "\n")] = 0;
        const char *base = tu_basename(path);
        if (strncmp(base, prefix, strlen(prefix))) continue;
        if (except && !strncmp(base, except, strlen(except))) continue;
        if (!found) snprintf(which, n, "%s", path);
        found = 1;
    }
    fclose(f);
    return found;
}

static void check_maps(const char *when)
{
    char which[4096] = "";
    CHECK(mapped("libncclmpi", NULL, which, sizeof(which)) == 1, "%s: libncclmpi is not mapped", when);
    CHECK(mapped("libnccl", "libncclmpi", which, sizeof(which)) == 0, "%s: %s is mapped", when, which);
    CHECK(mapped("libcuda", NULL, which, sizeof(which)) == 0, "%s: %s is mapped", when, which); /* libcuda, libcudart */
    CHECK(mapped("libnvidia", NULL, which, sizeof(which)) == 0, "%s: %s is mapped", when, which);
    CHECK(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s: libcuda.so.1 is loaded", when);
    CHECK(dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s: libnccl.so.2 is loaded", when);
    int (*loaded)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ncclmpi_nccl_loaded");
    CHECK(loaded != NULL, "ncclmpi_nccl_loaded not found");
    if (loaded) CHECK(loaded() == 0, "%s: ncclmpi_nccl_loaded() = %d", when, loaded());
}

int main(int argc, char **argv)
{
    tu_init(&argc, &argv, -2); /* MPI_Init(NULL, NULL) */
    int R = tu.rank, P = tu.size, next = (R + 1) % P, prev = (R + P - 1) % P;
    check_maps("after MPI_Init");
    enum { N = 4096 };
    double *s = (double *)tu_alloc(N * sizeof(double)), *r = (double *)tu_alloc(N * sizeof(double));
    double *e = (double *)malloc(N * sizeof(double));
    int *ag = (int *)tu_alloc(P * sizeof(int));
    for (int i = 0; i < N; i++) {
        s[i] = dval(R, i);
        e[i] = 0;
        for (int q = 0; q < P; q++) e[i] += dval(q, i);
    }
    /* collectives, blocking and not, on the world and on a new communicator */
    MPI_Comm d;
    OK(Comm_dup, MPI_COMM_WORLD, &d);
    MPI_Comm cs[2] = {MPI_COMM_WORLD, d};
    for (int c = 0; c < 2; c++) {
        tu_repoison(r);
        OK(Allreduce, s, r, N, MPI_DOUBLE, MPI_SUM, cs[c]);
        CHECK_D(r, e, N, "Allreduce");
        tu_repoison(r);
        MPI_Request q;
        OK(Iallreduce, s, r, N, MPI_DOUBLE, MPI_SUM, cs[c], &q);
        OK(Wait, &q, MPI_STATUS_IGNORE);
        CHECK_D(r, e, N, "Iallreduce");
        OK(Allgather, &R, 1, MPI_INT, ag, 1, MPI_INT, cs[c]);
        for (int k = 0; k < P; k++) CHECK(ag[k] == k);
        int b = R == P - 1 ? aval(R, 0, 0) : -1;
        OK(Bcast, &b, 1, MPI_INT, P - 1, cs[c]);
        CHECK(b == aval(P - 1, 0, 0));
        OK(Barrier, cs[c]);
    }
    /* point-to-point */
    int x = aval(R, 1, 0), y = -1;
    MPI_Request rq[2];
    MPI_Status st;
    OK(Irecv, &y, 1, MPI_INT, prev, 3, d, &rq[0]);
    OK(Isend, &x, 1, MPI_INT, next, 3, d, &rq[1]);
    OK(Waitall, 2, rq, MPI_STATUSES_IGNORE);
    CHECK(y == aval(prev, 1, 0));
    OK(Sendrecv, s, 100, MPI_DOUBLE, next, 4, r, 100, MPI_DOUBLE, prev, 4, MPI_COMM_WORLD, &st);
    CHECK_STATUS(st, prev, 4, MPI_DOUBLE, 100);
    MPI_Comm_free(&d);
    check_maps("after collectives and point-to-point");
    tu_free(s), tu_free(r), tu_free(ag), free(e);
    int rc = tu_finalize();
    check_maps("after MPI_Finalize");
    if (tu.failures && !rc) {
        fprintf(stderr, "[%s %d] FAIL after MPI_Finalize\n", tu.prog, R);
        rc = 1;
    }
    return rc;
}
