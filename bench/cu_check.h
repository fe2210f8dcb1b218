/* A CUDA driver call checked: on an error, its name and the call on stderr, then CK_FAIL (defined
 * by the including program before this header: exit(1) if not). CK_PROG names the program. */
#ifndef NM_BENCH_CU_CHECK_H
#define NM_BENCH_CU_CHECK_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef CK_FAIL
#define CK_FAIL() exit(1)
#endif
#define CK(x)                                                      \
    do {                                                           \
        CUresult r_ = (x);                                         \
        if (r_ != CUDA_SUCCESS) {                                  \
            const char *s_ = "?";                                  \
            cuGetErrorName(r_, &s_);                               \
            fprintf(stderr, "%s: %s: %s\n", CK_PROG, #x, s_);      \
            CK_FAIL();                                             \
        }                                                          \
    } while (0)
#endif
