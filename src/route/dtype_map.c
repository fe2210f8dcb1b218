/* ncclmpi: predefined MPI datatypes and ops -> NCCL. Open MPI's handles are addresses, so these
 * are small searched tables rather than arrays indexed by handle. */
#include "route/route.h"

#include <nccl.h>
#include <stddef.h>

typedef struct { MPI_Datatype dt; int nccl; const char *name; } dtype_row_t;

/* Integer types map by size and signedness; MPI_CHAR is signed char on every ABI we build for.
 * 16-bit integers, bool, complex and long double have no NCCL type: NM_UNSUPPORTED (staged). */
#define ROW(dt, nccl) {dt, nccl, #dt}
static const dtype_row_t dtype_rows[] = {
    ROW(MPI_CHAR, ncclInt8), ROW(MPI_SIGNED_CHAR, ncclInt8), ROW(MPI_INT8_T, ncclInt8),
    ROW(MPI_UNSIGNED_CHAR, ncclUint8), ROW(MPI_UINT8_T, ncclUint8), ROW(MPI_BYTE, ncclUint8),
    ROW(MPI_INT, ncclInt32), ROW(MPI_INT32_T, ncclInt32),
    ROW(MPI_UNSIGNED, ncclUint32), ROW(MPI_UINT32_T, ncclUint32),
    ROW(MPI_LONG, sizeof(long) == 8 ? ncclInt64 : ncclInt32),
    ROW(MPI_UNSIGNED_LONG, sizeof(long) == 8 ? ncclUint64 : ncclUint32),
    ROW(MPI_LONG_LONG, ncclInt64), ROW(MPI_LONG_LONG_INT, ncclInt64), ROW(MPI_INT64_T, ncclInt64),
    ROW(MPI_UNSIGNED_LONG_LONG, ncclUint64), ROW(MPI_UINT64_T, ncclUint64),
    ROW(MPI_AINT, sizeof(MPI_Aint) == 8 ? ncclInt64 : ncclInt32),
    ROW(MPI_OFFSET, sizeof(MPI_Offset) == 8 ? ncclInt64 : ncclInt32),
    ROW(MPI_COUNT, sizeof(MPI_Count) == 8 ? ncclInt64 : ncclInt32),
    ROW(MPI_FLOAT, ncclFloat32), ROW(MPI_DOUBLE, ncclFloat64),
    ROW(MPI_INTEGER, ncclInt32), ROW(MPI_REAL, ncclFloat32), ROW(MPI_DOUBLE_PRECISION, ncclFloat64),
    ROW(MPI_INTEGER8, ncclInt64), ROW(MPI_REAL8, ncclFloat64), ROW(MPI_REAL4, ncclFloat32),
    ROW(MPI_INTEGER4, ncclInt32), ROW(MPI_INTEGER1, ncclInt8),
    /* no NCCL type: listed for names only */
    ROW(MPI_SHORT, NM_UNSUPPORTED), ROW(MPI_UNSIGNED_SHORT, NM_UNSUPPORTED), ROW(MPI_INT16_T, NM_UNSUPPORTED),
    ROW(MPI_UINT16_T, NM_UNSUPPORTED), ROW(MPI_C_BOOL, NM_UNSUPPORTED), ROW(MPI_LONG_DOUBLE, NM_UNSUPPORTED),
    ROW(MPI_C_FLOAT_COMPLEX, NM_UNSUPPORTED), ROW(MPI_C_DOUBLE_COMPLEX, NM_UNSUPPORTED),
    ROW(MPI_WCHAR, NM_UNSUPPORTED), ROW(MPI_LOGICAL, NM_UNSUPPORTED), ROW(MPI_PACKED, NM_UNSUPPORTED),
    ROW(MPI_2INT, NM_UNSUPPORTED), ROW(MPI_FLOAT_INT, NM_UNSUPPORTED), ROW(MPI_DOUBLE_INT, NM_UNSUPPORTED),
    ROW(MPI_LONG_INT, NM_UNSUPPORTED), ROW(MPI_SHORT_INT, NM_UNSUPPORTED), ROW(MPI_LONG_DOUBLE_INT, NM_UNSUPPORTED),
};
#undef ROW

static const dtype_row_t *find_dtype(MPI_Datatype dt)
{
    for (size_t i = 0; i < sizeof(dtype_rows) / sizeof(dtype_rows[0]); i++)
        if (dtype_rows[i].dt == dt) return &dtype_rows[i];
    return NULL;
}

int nm_map_dtype(MPI_Datatype dt)
{
    const dtype_row_t *r = find_dtype(dt);
    /* MPI_BYTE is not a reduction type in MPI; keep it out of reductions */
    if (!r || dt == MPI_BYTE) return NM_UNSUPPORTED;
    return r->nccl;
}

const char *nm_dtype_name(MPI_Datatype dt)
{
    const dtype_row_t *r = find_dtype(dt);
    return r ? r->name : NULL;
}

int nm_map_op(MPI_Op op)
{
    if (op == MPI_SUM) return ncclSum;
    if (op == MPI_PROD) return ncclProd;
    if (op == MPI_MIN) return ncclMin;
    if (op == MPI_MAX) return ncclMax;
    return NM_UNSUPPORTED; /* LAND LOR LXOR BAND BOR BXOR MAXLOC MINLOC REPLACE NO_OP user ops */
}

size_t nm_nccl_type_size(int t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}
