/* ncclmpi_info: what this ncclmpi is and how it is configured.
 *   ncclmpi_info        version, build facts, intercepted functions
 *   ncclmpi_info -c     every NCCLMPI_* variable with its default, current value and meaning
 *   ncclmpi_info -m     the same table as Markdown (doc/config.md is made from it)
 */
#include <stdio.h>
#include <string.h>

#include "ncclmpi.h"
#include "nm_build.h"
#include "util/config.h"
#include "util/stats.h"

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "-c")) { nm_config_print(stdout, 0); return 0; }
    if (argc > 1 && !strcmp(argv[1], "-m")) { nm_config_print(stdout, 1); return 0; }
    if (argc > 1) {
        fprintf(stderr, "usage: ncclmpi_info [-c | -m]\n");
        return 2;
    }
    printf("ncclmpi %s (NCCL %s headers)\n", PACKAGE_VERSION, NM_NCCL_BUILD_VERSION);
    printf("  NCCL library (dlopen'ed on first device use): %s\n", NM_NCCL_DEFAULT_LIB);
    printf("  intercepted MPI functions (%d):", NM_FN_COUNT);
    for (int i = 0; i < NM_FN_COUNT; i++) printf("%s%s", i % 8 ? " " : "\n    ", nm_fn_names[i]);
    printf("\n  configuration: ncclmpi_info -c\n");
    return 0;
}
