/* host_ranges_prog: host-buffer MPI_Allreduce calls in a process where the CUDA driver is loaded
 * (the stand-in, test/unit/fake_cuda.c, which counts its pointer queries), for
 * test/unit/host_ranges.sh. For buffers on the stack, in static data, from a small malloc (the
 * program break's range), from a large malloc (mapped) and a stand-in device allocation, prints
 * the driver's pointer queries per call and checks every result; then the device allocation again
 * from a coroutine (ucontext) whose stack was mapped after it, below it: the range from the
 * coroutine's frame up to the thread's stack top holds the device buffer, which must still be
 * asked about (where=device_coroutine). Output per case:
 *   where=<w> queries_per_call=<q> route=<host|device>
 * and "host_ranges_prog: ok" when every result was right.   (NCCLMPI_CUDA_LIB: the stand-in) */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "ncclmpi.h"
#include "stand_in.h"

enum { CALLS = 50 };
static int in_static[2];
static int (*get)(const char *, ncclmpi_stats_t *);
static unsigned long *queries;
static int bad;

/* CALLS host or device MPI_Allreduce calls of 1 int on b: its line of output */
static void measure(int *b, int salt, const char *name)
{
    ncclmpi_stats_t s0, s1;
    memset(&s0, 0, sizeof(s0));
    memset(&s1, 0, sizeof(s1));
    if (get) get("Allreduce", &s0);
    const unsigned long q0 = *queries;
    for (int i = 0; i < CALLS; i++) {
        b[0] = i + salt;
        b[1] = -1;
        MPI_Allreduce(b, b + 1, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
        if (b[1] != i + salt) bad++;
    }
    const unsigned long q = *queries - q0;
    if (get) get("Allreduce", &s1);
    printf("where=%s queries_per_call=%.2f route=%s\n", name, (double)q / CALLS,
           s1.route[NCCLMPI_ROUTE_HOST] - s0.route[NCCLMPI_ROUTE_HOST] == CALLS ? "host" : "device");
}

static int *coroutine_buf;
static ucontext_t main_ctx, coroutine_ctx;
static void coroutine(void) { measure(coroutine_buf, 9, "device_coroutine"); }

int main(int argc, char **argv)
{
    CUdeviceptr dev;
    void *h = stand_in_driver("host_ranges_prog", 1, 2 * sizeof(int), &dev);
    queries = h ? (unsigned long *)dlsym(h, "fake_cuda_pointer_queries") : NULL;
    if (!queries) return 2;
    MPI_Init(&argc, &argv);
    get = (int (*)(const char *, ncclmpi_stats_t *))dlsym(RTLD_DEFAULT, "ncclmpi_get_stats");
    int on_stack[2];
    int *small = malloc(2 * sizeof(int)), *large = malloc(2 * sizeof(int) + (8 << 20));
    int *const where[] = {on_stack, in_static, small, large, (int *)(uintptr_t)dev};
    const char *const name[] = {"stack", "static", "small_malloc", "large_malloc", "device"};
    for (int w = 0; w < 5; w++) measure(where[w], w, name[w]);
    /* a coroutine's stack mapped after the device buffer (mappings grow downwards): the device
     * buffer lies between the coroutine's frames and the thread's stack top */
    const size_t stack_bytes = 1 << 20;
    char *cstack = mmap(NULL, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    coroutine_buf = (int *)(uintptr_t)dev;
    if (cstack == MAP_FAILED || !((uintptr_t)cstack < (uintptr_t)dev && (uintptr_t)dev < (uintptr_t)on_stack)) {
        printf("where=device_coroutine skipped (layout: stack %p, device %p, coroutine stack %p)\n", (void *)on_stack,
               (void *)(uintptr_t)dev, (void *)cstack);
    } else {
        getcontext(&coroutine_ctx);
        coroutine_ctx.uc_stack.ss_sp = cstack;
        coroutine_ctx.uc_stack.ss_size = stack_bytes;
        coroutine_ctx.uc_link = &main_ctx;
        makecontext(&coroutine_ctx, coroutine, 0);
        swapcontext(&main_ctx, &coroutine_ctx);
    }
    free(small);
    free(large);
    MPI_Finalize();
    if (!bad) printf("host_ranges_prog: ok\n");
    else fprintf(stderr, "host_ranges_prog: %d wrong results\n", bad);
    return bad ? 1 : 0;
}
