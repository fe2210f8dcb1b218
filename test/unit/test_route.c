/* Unit tests of src/route and src/util: pure decisions, maps and config parsing. No MPI run,
 * no GPU (MPI handles are link-time constants in Open MPI). */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "route/nm_op.h"
#include "route/route.h"
#include "util/config.h"
#include "util/stats.h"

static int failures;
#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static nm_route_in_t dev_coll(int kind)
{
    nm_route_in_t in;
    memset(&in, 0, sizeof(in));
    in.kind = kind;
    in.any_device = 1;
    in.comm_nccl = 1;
    in.nccl_type = ncclFloat32;
    in.nccl_op = ncclSum;
    in.s_contig = in.r_contig = in.bytes_match = 1;
    return in;
}

static void test_route(void)
{
    nm_route_in_t in = dev_coll(NM_OPK_ALLREDUCE);
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL);
    in.any_device = 0;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST);
    CHECK(nm_route(&in).why == NM_WHY_HOST_BUFFERS);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.disable = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.nccl_op = NM_UNSUPPORTED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_OP);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.nccl_type = NM_UNSUPPORTED;
    CHECK(nm_route(&in).why == NM_WHY_TYPE);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.comm_nccl = 0;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_COMM);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.any_host = 1;
    CHECK(nm_route(&in).why == NM_WHY_MIXED);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.devices_differ = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ERROR && nm_route(&in).why == NM_WHY_DEVICES);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.force_staged = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED);
    /* data movement ignores op/type maps but needs contiguous, size-matched bytes */
    in = dev_coll(NM_OPK_BCAST);
    in.nccl_type = NM_UNSUPPORTED;
    in.nccl_op = NM_UNSUPPORTED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL);
    in.r_contig = 0;
    CHECK(nm_route(&in).why == NM_WHY_NONCONTIG);
    in = dev_coll(NM_OPK_ALLGATHER);
    in.bytes_match = 0;
    CHECK(nm_route(&in).why == NM_WHY_SIGNATURE);
    int staged_kinds[] = {NM_OPK_SCAN, NM_OPK_EXSCAN, NM_OPK_ALLTOALLW};
    for (int i = 0; i < 3; i++) {
        in = dev_coll(staged_kinds[i]);
        CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_KIND);
    }
    in = dev_coll(NM_OPK_SEND);
    CHECK(nm_route(&in).why == NM_WHY_P2P);
    in = dev_coll(NM_OPK_SEND);
    in.flags = NM_OPF_PERS;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ERROR && nm_route(&in).why == NM_WHY_PERSISTENT);
    /* nonblocking forms route like blocking ones */
    in = dev_coll(NM_OPK_REDUCE_SCATTER_BLOCK);
    in.flags = NM_OPF_NB;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL);
    for (int w = 0; w < NM_WHY_COUNT_; w++) CHECK(strcmp(nm_why_str((nm_why_t)w), "?") != 0);
}

static void test_maps(void)
{
    CHECK(nm_map_dtype(MPI_INT) == ncclInt32);
    CHECK(nm_map_dtype(MPI_UNSIGNED) == ncclUint32);
    CHECK(nm_map_dtype(MPI_CHAR) == ncclInt8);
    CHECK(nm_map_dtype(MPI_SIGNED_CHAR) == ncclInt8);
    CHECK(nm_map_dtype(MPI_UNSIGNED_CHAR) == ncclUint8);
    CHECK(nm_map_dtype(MPI_INT8_T) == ncclInt8);
    CHECK(nm_map_dtype(MPI_UINT64_T) == ncclUint64);
    CHECK(nm_map_dtype(MPI_LONG) == (sizeof(long) == 8 ? ncclInt64 : ncclInt32));
    CHECK(nm_map_dtype(MPI_LONG_LONG) == ncclInt64);
    CHECK(nm_map_dtype(MPI_UNSIGNED_LONG) == ncclUint64);
    CHECK(nm_map_dtype(MPI_AINT) == ncclInt64);
    CHECK(nm_map_dtype(MPI_OFFSET) == ncclInt64);
    CHECK(nm_map_dtype(MPI_COUNT) == ncclInt64);
    CHECK(nm_map_dtype(MPI_FLOAT) == ncclFloat32);
    CHECK(nm_map_dtype(MPI_DOUBLE) == ncclFloat64);
    CHECK(nm_map_dtype(MPI_SHORT) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_INT16_T) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_C_BOOL) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_LONG_DOUBLE) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_C_DOUBLE_COMPLEX) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_2INT) == NM_UNSUPPORTED);
    CHECK(nm_map_dtype(MPI_BYTE) == NM_UNSUPPORTED);
    CHECK(nm_map_op(MPI_SUM) == ncclSum);
    CHECK(nm_map_op(MPI_PROD) == ncclProd);
    CHECK(nm_map_op(MPI_MIN) == ncclMin);
    CHECK(nm_map_op(MPI_MAX) == ncclMax);
    MPI_Op staged_ops[] = {MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE};
    for (size_t i = 0; i < sizeof(staged_ops) / sizeof(staged_ops[0]); i++) CHECK(nm_map_op(staged_ops[i]) == NM_UNSUPPORTED);
    CHECK(nm_nccl_type_size(ncclFloat64) == 8);
    CHECK(!strcmp(nm_dtype_name(MPI_DOUBLE), "MPI_DOUBLE"));
}

static void test_config(void)
{
    size_t sz;
    int b, lvl;
    CHECK(nm_cfg_parse_size("4M", &sz) == 0 && sz == 4u << 20);
    CHECK(nm_cfg_parse_size("1G", &sz) == 0 && sz == 1u << 30);
    CHECK(nm_cfg_parse_size("64KB", &sz) == 0 && sz == 64u << 10);
    CHECK(nm_cfg_parse_size("123", &sz) == 0 && sz == 123);
    CHECK(nm_cfg_parse_size("x1", &sz) != 0);
    CHECK(nm_cfg_parse_size("4Q", &sz) != 0);
    CHECK(nm_cfg_parse_bool("yes", &b) == 0 && b == 1);
    CHECK(nm_cfg_parse_bool("0", &b) == 0 && b == 0);
    CHECK(nm_cfg_parse_bool("maybe", &b) != 0);
    CHECK(nm_cfg_parse_level("debug", &lvl) == 0 && lvl == 4);
    CHECK(nm_cfg_parse_level("loud", &lvl) != 0);
    nm_config_load();
    CHECK(nm_cfg.STREAM_ORDER == 1);
    CHECK(nm_cfg.STAGE_CHUNK == 4u << 20);
    for (int i = 0; i < nm_cfg_nrows; i++) CHECK(nm_cfg_rows[i].doc && strlen(nm_cfg_rows[i].doc) > 10);
}

static void test_table(void)
{
    CHECK(nm_fn_lookup("Allreduce") >= 0);
    CHECK(nm_fn_lookup("MPI_Waitsome") >= 0);
    CHECK(nm_fn_lookup("Allreduce_nonexistent") < 0);
    CHECK(NM_FN_COUNT >= 73);
}

int main(void)
{
    test_route();
    test_maps();
    test_config();
    test_table();
    if (failures) {
        fprintf(stderr, "test_route: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_route: all checks passed\n");
    return 0;
}
