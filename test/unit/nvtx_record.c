/* An NVTX injection library that records ranges (test/unit/nvtx.sh): loaded by NVTX3 from
 * NVTX_INJECTION64_PATH at the first NVTX call, as a profiler's is; writes "push NAME" and "pop"
 * lines to the file NVTX_RECORD_FILE names. Lets a test see the ranges ncclmpi emits under
 * NCCLMPI_NVTX=1 without Nsight. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out;

static int NVTX_API record_push(const char *name)
{
    fprintf(out, "push %s\n", name);
    fflush(out);
    return 0;
}

static int NVTX_API record_pop(void)
{
    fprintf(out, "pop\n");
    fflush(out);
    return 0;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    const char *path = getenv("NVTX_RECORD_FILE");
    if (!cb || !path || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || size <= NVTX_CBID_CORE_RangePop)
        return 0;
    if (!(out = fopen(path, "a"))) return 0;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)record_push;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)record_pop;
    return 1;
}
