/* ncclmpi: which allreduces of a group share one NCCL call (route.h, "fused"), and where NCCL needs
 * a group's MAX and MIN reductions apart (route.h, "MAX and MIN"). Pure. */
#include <nccl.h>

#include "route/nm_op.h"
#include "route/route.h"

static int integer_type(int t)
{
    return t == ncclInt8 || t == ncclUint8 || t == ncclInt32 || t == ncclUint32 || t == ncclInt64 || t == ncclUint64;
}

int nm_fuse_possible(int comm_size, int mode) { return mode == NM_FUSE_ALL || (mode == NM_FUSE_EXACT && comm_size >= 2); }

static int fusable(const nm_fuse_op_t *o, int comm_size, int mode, size_t max_bytes)
{
    const size_t es = nm_nccl_type_size(o->nccl_type);
    if (o->kind != NM_OPK_ALLREDUCE || !es || o->nccl_op == NM_UNSUPPORTED || o->count == 0 || o->count > max_bytes / es)
        return 0;
    return mode == NM_FUSE_ALL || integer_type(o->nccl_type) || comm_size == 2;
}

/* each operation on a 16-byte boundary of the buffer (the copy kernel's words) */
static size_t slot(size_t count, size_t es)
{
    const size_t per = 16 / es;
    return (count + per - 1) / per * per;
}

int nm_fuse_plan(const nm_fuse_op_t *ops, int n, int comm_size, int mode, size_t max_bytes, int min_ops, int *bucket,
                 size_t *offset, size_t *total)
{
    /* the (type, op) pairs of the group's fusable operations: a few at most; operations of a
     * pair beyond KEYS run alone */
    enum { KEYS = 16 };
    struct {
        int type, op, nops, call;  /* call: the one being filled, or -1 */
    } key[KEYS];
    int nkeys = 0, ncalls = 0;
    const int possible = nm_fuse_possible(comm_size, mode);
    for (int i = 0; i < n; i++) {
        bucket[i] = -1;  /* (first pass: the key's index, or -1) */
        offset[i] = 0;
        if (!possible || !fusable(&ops[i], comm_size, mode, max_bytes)) continue;
        int k = 0;
        while (k < nkeys && (key[k].type != ops[i].nccl_type || key[k].op != ops[i].nccl_op)) k++;
        if (k == nkeys) {
            if (nkeys == KEYS) continue;
            key[k].type = ops[i].nccl_type;
            key[k].op = ops[i].nccl_op;
            key[k].nops = 0;
            key[k].call = -1;
            nkeys++;
        }
        key[k].nops++;
        bucket[i] = k;
    }
    /* second pass: the operations of pairs with at least min_ops of them fill calls in issue
     * order, a new call where the current one would pass NM_FUSE_BUCKET_MAX bytes */
    for (int i = 0; i < n; i++) {
        const int k = bucket[i];
        if (k < 0) continue;
        if (key[k].nops < min_ops) {
            bucket[i] = -1;
            continue;
        }
        const size_t es = nm_nccl_type_size(ops[i].nccl_type), need = slot(ops[i].count, es);
        if (key[k].call < 0 || (total[key[k].call] + need) * es > NM_FUSE_BUCKET_MAX) {
            key[k].call = ncalls;
            total[ncalls++] = 0;
        }
        bucket[i] = key[k].call;
        offset[i] = total[key[k].call];
        total[key[k].call] += need;
    }
    return ncalls;
}

int nm_minmax_hazard(int nccl_version, int comm_size) { return comm_size >= 2 && nccl_version >= 21900 && nccl_version < 22900; }
