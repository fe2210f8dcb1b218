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
    in.rank_kind = NM_RK_DEVICE;
    in.cap = NM_CAP_READY;
    in.nccl_type = ncclFloat32;
    in.nccl_op = ncclSum;
    in.vote = -1;
    return in;
}

static void test_route(void)
{
    nm_route_in_t in = dev_coll(NM_OPK_ALLREDUCE);
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && nm_route(&in).act == 0);
    in.rank_kind = NM_RK_HOST;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST && nm_route(&in).why == NM_WHY_HOST_BUFFERS);
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
    in.cap = NM_CAP_STAGED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_COMM);
    in.cap = NM_CAP_FAILED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ERROR && nm_route(&in).why == NM_WHY_FAILED);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.devices_differ = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ERROR && nm_route(&in).why == NM_WHY_DEVICES);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.force_staged = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED);
    /* the one-shot kernels: on a READY communicator, also for ops and types NCCL lacks; never
     * under NCCLMPI_FORCE_STAGED or NCCLMPI_AGREE, never on a communicator without a window */
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.oneshot = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ONESHOT && nm_route(&in).why == NM_WHY_ONESHOT && nm_route(&in).act == 0);
    in.nccl_op = NM_UNSUPPORTED;
    in.nccl_type = NM_UNSUPPORTED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ONESHOT);
    in.flags = NM_OPF_NB;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ONESHOT);
    in.force_staged = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED);
    in.force_staged = 0;
    in.agree = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED);
    in.agree = 0;
    int caps[] = {NM_CAP_UNKNOWN, NM_CAP_PENDING, NM_CAP_STAGED, NM_CAP_FAILED, NM_CAP_INTER};
    for (int i = 0; i < 5; i++) {
        in.cap = caps[i];
        CHECK(nm_route(&in).route != NCCLMPI_ROUTE_ONESHOT);
    }
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.oneshot = 1;
    in.rank_kind = NM_RK_HOST;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST);
    /* data movement ignores op/type maps */
    in = dev_coll(NM_OPK_BCAST);
    in.nccl_type = NM_UNSUPPORTED;
    in.nccl_op = NM_UNSUPPORTED;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL);
    int staged_kinds[] = {NM_OPK_SCAN, NM_OPK_EXSCAN, NM_OPK_ALLTOALLW};
    for (int i = 0; i < 3; i++) {
        in = dev_coll(staged_kinds[i]);
        CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_KIND);
    }
    in = dev_coll(NM_OPK_SEND);
    CHECK(nm_route(&in).why == NM_WHY_P2P);
    /* neighbourhood collectives: staged on device buffers, the real MPI on host ones, whatever
     * the communicator's state; never an NCCL communicator made or promised for them */
    int neigh[] = {NM_OPK_NEIGHBOR_ALLGATHER, NM_OPK_NEIGHBOR_ALLGATHERV, NM_OPK_NEIGHBOR_ALLTOALL, NM_OPK_NEIGHBOR_ALLTOALLV};
    int all_caps[] = {NM_CAP_UNKNOWN, NM_CAP_PENDING, NM_CAP_READY, NM_CAP_STAGED, NM_CAP_FAILED, NM_CAP_INTER};
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 6; c++)
            for (int nbf = 0; nbf < 2; nbf++) {
                in = dev_coll(neigh[i]);
                in.cap = all_caps[c];
                in.flags = nbf ? NM_OPF_NB : 0;
                CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_NEIGHBOR && nm_route(&in).act == 0);
                in.rank_kind = NM_RK_HOST;
                CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST && nm_route(&in).act == 0);
            }
    in = dev_coll(NM_OPK_SEND);
    in.flags = NM_OPF_PERS;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_PERSISTENT);
    /* persistent collectives (MPI-4 _init): on device buffers each start runs the nonblocking
     * form; host buffers go to the real MPI, but for the v/w forms where a rank may have none
     * while others have some: those restart on every rank, whatever its buffers; the init neither
     * creates nor connects an NCCL communicator (it is not where a device rank's peers make theirs) */
    for (int c = 0; c < 6; c++)
        for (int k = 1; k < NM_OPK_COUNT; k++) {
            if (!nm_opkind_is_coll(k) || k == NM_OPK_BARRIER) continue;
            const int ambig = (nm_opk(k) & NM_KF_AMBIG) != 0;
            CHECK(nm_pers_coll_restarts(k) && nm_pers_coll_everywhere(k) == ambig);
            in = dev_coll(k);
            in.flags = NM_OPF_PERS;
            in.cap = all_caps[c];
            in.peers_cold = 1;
            const nm_decision_t d = nm_route(&in);
            CHECK(d.act == 0);
            CHECK(d.route == NCCLMPI_ROUTE_STAGED && d.why == NM_WHY_PERSISTENT_START);
            for (int rk = 0; rk < 2; rk++) {
                in.rank_kind = rk ? NM_RK_EMPTY : NM_RK_HOST;
                const nm_decision_t h = nm_route(&in);
                CHECK(h.act == 0);
                CHECK(ambig ? h.route == NCCLMPI_ROUTE_STAGED && h.why == NM_WHY_PERSISTENT_START : h.route == NCCLMPI_ROUTE_HOST);
            }
            in.disable = 1;  /* (NCCLMPI_DISABLE, alike on every rank) */
            CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST);
        }
    CHECK(!nm_pers_coll_restarts(NM_OPK_BARRIER) && !nm_pers_coll_restarts(NM_OPK_SEND) &&
          !nm_pers_coll_everywhere(NM_OPK_ALLREDUCE) && !nm_pers_coll_everywhere(NM_OPK_BARRIER));
    /* persistent neighbourhood collectives: restarted on every rank, whatever its buffers */
    for (int i = 0; i < 5; i++) {
        const int k = NM_OPK_NEIGHBOR_ALLGATHER + i;
        CHECK((nm_opk(k) & NM_KF_NEIGH) && nm_pers_coll_restarts(k) && nm_pers_coll_everywhere(k));
        for (int rk = 0; rk < 3; rk++) {
            in = dev_coll(k);
            in.flags = NM_OPF_PERS;
            in.rank_kind = rk == 0 ? NM_RK_DEVICE : rk == 1 ? NM_RK_HOST : NM_RK_EMPTY;
            const nm_decision_t d = nm_route(&in);
            CHECK(d.route == NCCLMPI_ROUTE_STAGED && d.why == NM_WHY_PERSISTENT_START && d.act == 0);
        }
    }
    /* lifecycle: a blocking device collective creates, a nonblocking one marks pending and is
     * staged, the next blocking collective of any kind creates */
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.cap = NM_CAP_UNKNOWN;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && (nm_route(&in).act & NM_ACT_CREATE));
    in.flags = NM_OPF_NB;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).act == NM_ACT_PENDING);
    in = dev_coll(NM_OPK_BARRIER);
    in.rank_kind = NM_RK_EMPTY;
    in.cap = NM_CAP_PENDING;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST && nm_route(&in).act == NM_ACT_CREATE);
    /* ambiguous kinds never create from a device rank's view, and carry the real call */
    in = dev_coll(NM_OPK_GATHERV);
    in.cap = NM_CAP_UNKNOWN;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).act == 0);
    in.cap = NM_CAP_READY;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && nm_route(&in).act == NM_ACT_CARRIER);
    /* sends and receives not connected (a communicator larger than NCCLMPI_CONNECT_PEERS): a
     * blocking alltoall connects them and then runs on NCCL; nonblocking and ambiguous ones are
     * staged meanwhile; kinds without a body of sends and receives do not care */
    in = dev_coll(NM_OPK_ALLTOALL);
    in.peers_cold = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && nm_route(&in).act == NM_ACT_CONNECT);
    in.flags = NM_OPF_NB;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_PEERS && nm_route(&in).act == 0);
    in = dev_coll(NM_OPK_GATHERV);
    in.peers_cold = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_PEERS);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.peers_cold = 1;
    in.flags = NM_OPF_NB;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && nm_route(&in).act == 0);
    for (int w = 0; w < NM_WHY_COUNT_; w++) CHECK(strcmp(nm_why_str((nm_why_t)w), "?") != 0);
    for (int k = 0; k < NM_OPK_COUNT; k++) CHECK(strcmp(nm_opkind_name(k), "?") != 0);
    for (int c = 0; c < NM_CAP_COUNT_; c++) CHECK(strcmp(nm_cap_str(c), "?") != 0);
}

/* ---- the route does not depend on per-rank facts ------------------------------------------
 * For every combination of shared facts (kind, blocking, cap, op/type support, settings) and
 * every assignment of per-rank memory kinds that the contract allows over 3 ranks, the ranks'
 * decisions must be compatible: the same creation and pending actions, and the same channels.
 * A rank takes part in NCCL (non-AMBIG kinds need every rank there) and/or makes the real MPI
 * call (HOST, STAGED, or NCCL with a carrier): for a collective, either every rank makes the real
 * call, or none does. */
enum { NR = 3 };

static int makes_real_call(nm_decision_t d)
{
    return d.route == NCCLMPI_ROUTE_HOST || d.route == NCCLMPI_ROUTE_STAGED ||
           (d.route == NCCLMPI_ROUTE_NCCL && (d.act & NM_ACT_CARRIER));
}

static int checked_cases;

static void check_ranks(nm_route_in_t base, const int rk[NR])
{
    nm_route_in_t in[NR];
    nm_decision_t d[NR];
    int vote = NM_VOTE_ANY;
    for (int r = 0; r < NR; r++) {
        in[r] = base;
        in[r].rank_kind = rk[r];
        int v = nm_route_vote(&in[r]);
        if (v < vote) vote = v;
    }
    for (int r = 0; r < NR; r++) {
        if (base.agree && !(base.flags & NM_OPF_NB)) in[r].vote = vote;
        d[r] = nm_route(&in[r]);
    }
    int amb = (nm_opk(base.kind) & NM_KF_AMBIG) != 0;
    int any_error = 0, any_nccl = 0, real = 0;
    for (int r = 0; r < NR; r++) {
        any_error |= d[r].route == NCCLMPI_ROUTE_ERROR;
        any_nccl |= d[r].route == NCCLMPI_ROUTE_NCCL;
        real += makes_real_call(d[r]);
    }
    checked_cases++;
    const unsigned shared_acts = NM_ACT_CREATE | NM_ACT_PENDING | NM_ACT_CONNECT;
    for (int r = 1; r < NR; r++) {
        if ((d[r].act & shared_acts) != (d[0].act & shared_acts)) {
            fprintf(stderr, "kind %s nb %d cap %s agree %d: ranks %d/%d act %u/%u\n", nm_opkind_name(base.kind),
                    !!(base.flags & NM_OPF_NB), nm_cap_str(base.cap), base.agree, rk[0], rk[r], d[0].act, d[r].act);
            failures++;
        }
    }
    if (any_error) return; /* erroneous state (failed communicator): errors raised, no check */
    if (real != 0 && real != NR) {
        fprintf(stderr, "kind %s nb %d cap %s agree %d kinds %d%d%d: %d of %d ranks make the real call\n",
                nm_opkind_name(base.kind), !!(base.flags & NM_OPF_NB), nm_cap_str(base.cap), base.agree, rk[0], rk[1],
                rk[2], real, NR);
        failures++;
    }
    if (any_nccl && !amb)
        for (int r = 0; r < NR; r++)
            if (d[r].route != NCCLMPI_ROUTE_NCCL) {
                fprintf(stderr, "kind %s cap %s: rank kinds %d%d%d: NCCL on some ranks only\n", nm_opkind_name(base.kind),
                        nm_cap_str(base.cap), rk[0], rk[1], rk[2]);
                failures++;
                break;
            }
}

static void test_route_agreement(void)
{
    const int nccl_types[] = {ncclFloat32, NM_UNSUPPORTED}, nccl_ops[] = {ncclSum, NM_UNSUPPORTED};
    for (int kind = 1; kind < NM_OPK_COUNT; kind++) {
        if (!nm_opkind_is_coll(kind)) continue;
        int amb = (nm_opk(kind) & NM_KF_AMBIG) != 0;
        for (int nb = 0; nb < 2; nb++)
            for (int cap = 0; cap < NM_CAP_COUNT_; cap++)
                for (int ti = 0; ti < 2; ti++)
                    for (int oi = 0; oi < 2; oi++)
                        for (int agree = 0; agree < 2; agree++)
                            for (int forced = 0; forced < 2; forced++)
                            for (int cold = 0; cold < 2; cold++) {
                                nm_route_in_t base;
                                memset(&base, 0, sizeof(base));
                                base.kind = kind;
                                base.flags = nb ? NM_OPF_NB : 0;
                                base.cap = cap;
                                base.nccl_type = nccl_types[ti];
                                base.nccl_op = nccl_ops[oi];
                                base.agree = agree;
                                base.force_staged = forced;
                                base.peers_cold = cold;
                                base.vote = -1;
                                /* per-rank kinds over NR ranks: 3^NR assignments */
                                for (int code = 0; code < 27; code++) {
                                    int rk[NR] = {code % 3, (code / 3) % 3, code / 9};
                                    int ne = 0, dev = 0, host = 0;
                                    for (int r = 0; r < NR; r++) {
                                        ne += rk[r] == NM_RK_EMPTY;
                                        dev += rk[r] == NM_RK_DEVICE;
                                        host += rk[r] == NM_RK_HOST;
                                    }
                                    /* the contract: without AGREE, non-empty ranks share one kind;
                                     * empty ranks only where counts are per rank (else all empty) */
                                    if (!agree && dev && host) continue;
                                    if (!amb && ne && ne != NR) continue;
                                    check_ranks(base, rk);
                                }
                            }
    }
    CHECK(checked_cases > 1000);
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
    CHECK(nm_cfg_parse_size("-4K", &sz) != 0);
    CHECK(nm_cfg_parse_size("99999999999999999999", &sz) != 0);
    CHECK(nm_cfg_parse_size("17179869184G", &sz) != 0);
    CHECK(nm_cfg_parse_bool("yes", &b) == 0 && b == 1);
    CHECK(nm_cfg_parse_bool("0", &b) == 0 && b == 0);
    CHECK(nm_cfg_parse_bool("OFF", &b) == 0 && b == 0);
    CHECK(nm_cfg_parse_bool("maybe", &b) != 0);
    CHECK(nm_cfg_parse_bool("", &b) != 0);
    CHECK(nm_cfg_parse_level("debug", &lvl) == 0 && lvl == 4);
    CHECK(nm_cfg_parse_level("loud", &lvl) != 0);

    /* every default parses, every row is documented, enumerations list their words */
    char *empty[] = {NULL};
    CHECK(nm_config_parse(empty) == 0);
    CHECK(nm_cfg.STREAM_ORDER == 1);
    CHECK(nm_cfg.STAGE_CHUNK == 4u << 20);
    CHECK(nm_cfg.STATS == NM_STATS_OFF && nm_cfg.stats_file == NULL);
    CHECK(!strcmp(nm_cfg.MANAGED, "device") && !strcmp(nm_cfg.LOG_SUBSYS, "ALL"));
    for (int i = 0; i < nm_cfg_nrows; i++) {
        const nm_cfg_row_t *r = &nm_cfg_rows[i];
        CHECK(r->doc && strlen(r->doc) > 10);
        if (r->type == NM_CFG_LEVEL || r->type == NM_CFG_ENUM || r->type == NM_CFG_LIST || r->type == NM_CFG_STATS)
            CHECK(r->accept && strlen(r->accept) > 2);
    }
    for (int i = 0; i < nm_cfg_script_nrows; i++) CHECK(nm_cfg_script_rows[i].doc && nm_cfg_script_rows[i].reader);

    /* one value at a time, into a private copy */
    nm_config_t c;
    memset(&c, 0, sizeof(c));
    const nm_cfg_row_t *tmo = nm_cfg_find("TIMEOUT"), *cmax = nm_cfg_find("COALESCE_MAX"),
                       *chunk = nm_cfg_find("STAGE_CHUNK"), *man = nm_cfg_find("MANAGED"),
                       *sub = nm_cfg_find("LOG_SUBSYS"), *log = nm_cfg_find("LOG"), *st = nm_cfg_find("STATS");
    CHECK(tmo && cmax && chunk && man && sub && log && st && !nm_cfg_find("NOPE"));
    if (!(tmo && cmax && chunk && man && sub && log && st)) return;
    CHECK(nm_cfg_parse_value(tmo, "30", &c) == 0 && c.TIMEOUT == 30);
    CHECK(nm_cfg_parse_value(tmo, "0", &c) == 0 && c.TIMEOUT == 0);
    CHECK(nm_cfg_parse_value(tmo, "-1", &c) != 0 && c.TIMEOUT == 0);
    CHECK(nm_cfg_parse_value(tmo, "10s", &c) != 0);
    CHECK(nm_cfg_parse_value(tmo, "", &c) != 0);
    CHECK(nm_cfg_parse_value(tmo, " 5", &c) != 0);
    CHECK(nm_cfg_parse_value(tmo, "99999999999999999999999", &c) != 0);
    CHECK(nm_cfg_parse_value(cmax, "0", &c) != 0);
    CHECK(nm_cfg_parse_value(cmax, "1", &c) == 0 && c.COALESCE_MAX == 1);
    CHECK(nm_cfg_parse_value(chunk, "1K", &c) != 0);
    CHECK(nm_cfg_parse_value(chunk, "48K", &c) == 0 && c.STAGE_CHUNK == 48u << 10);
    /* a chunk's bytes and elements fit an int: above 1G it is refused (the default kept) */
    CHECK(nm_cfg_parse_value(chunk, "1G", &c) == 0 && c.STAGE_CHUNK == (size_t)NM_STAGE_CHUNK_MAX);
    CHECK(nm_cfg_parse_value(chunk, "3G", &c) != 0 && c.STAGE_CHUNK == (size_t)NM_STAGE_CHUNK_MAX);
    CHECK(nm_cfg_parse_value(chunk, "16777216G", &c) != 0);
    CHECK(nm_cfg_parse_value(man, "HOST", &c) == 0 && !strcmp(c.MANAGED, "host"));
    CHECK(nm_cfg_parse_value(man, "Device", &c) == 0 && !strcmp(c.MANAGED, "device"));
    CHECK(nm_cfg_parse_value(man, "gpu", &c) != 0 && !strcmp(c.MANAGED, "device"));
    CHECK(nm_cfg_parse_value(man, "hos", &c) != 0);
    CHECK(nm_cfg_parse_value(log, "Info", &c) == 0 && c.LOG == 3);
    CHECK(nm_cfg_parse_value(log, "3", &c) != 0);
    CHECK(nm_cfg_parse_value(sub, "init, Coll ,p2p", &c) == 0 && !strcmp(c.LOG_SUBSYS, "INIT,COLL,P2P"));
    CHECK(nm_cfg_parse_value(sub, "all", &c) == 0 && !strcmp(c.LOG_SUBSYS, "ALL"));
    CHECK(nm_cfg_parse_value(sub, "INIT,COLLS", &c) != 0 && !strcmp(c.LOG_SUBSYS, "ALL"));
    CHECK(nm_cfg_parse_value(sub, "INIT,,COLL", &c) != 0);
    CHECK(nm_cfg_parse_value(sub, "", &c) != 0);
    CHECK(nm_cfg_parse_value(sub, "INIT,", &c) != 0);
    CHECK(nm_cfg_parse_value(st, "1", &c) == 0 && c.STATS == NM_STATS_SUMMARY);
    CHECK(nm_cfg_parse_value(st, "yes", &c) == 0 && c.STATS == NM_STATS_SUMMARY);
    CHECK(nm_cfg_parse_value(st, "Summary", &c) == 0 && c.STATS == NM_STATS_SUMMARY);
    CHECK(nm_cfg_parse_value(st, "rank", &c) == 0 && c.STATS == NM_STATS_RANK);
    CHECK(nm_cfg_parse_value(st, "off", &c) == 0 && c.STATS == NM_STATS_OFF);
    CHECK(nm_cfg_parse_value(st, "file:/tmp/s.%r", &c) == 0 && c.STATS == NM_STATS_FILE && c.stats_file &&
          !strcmp(c.stats_file, "/tmp/s.%r"));
    CHECK(nm_cfg_parse_value(st, "file:", &c) != 0 && c.STATS == NM_STATS_FILE);
    CHECK(nm_cfg_parse_value(st, "ranks", &c) != 0);
    char acc[256];
    CHECK(strstr(nm_cfg_accepted(man, acc, sizeof(acc)), "device, host") != NULL);
    CHECK(strstr(nm_cfg_accepted(tmo, acc, sizeof(acc)), ">= 0") != NULL);
    CHECK(strstr(nm_cfg_accepted(sub, acc, sizeof(acc)), "INIT, ROUTE") != NULL);

    /* names: edit distance and the closest known one (library and script variables) */
    int d;
    CHECK(nm_cfg_edit_distance("STATS", "STATS") == 0);
    CHECK(nm_cfg_edit_distance("STAT", "STATS") == 1);
    CHECK(nm_cfg_edit_distance("kitten", "sitting") == 3);
    CHECK(nm_cfg_edit_distance("", "LOG") == 3);
    CHECK(!strcmp(nm_cfg_closest("STAT", &d), "STATS") && d == 1);
    CHECK(!strcmp(nm_cfg_closest("TIMOUT", &d), "TIMEOUT") && d == 1);
    CHECK(!strcmp(nm_cfg_closest("coalesce_max", &d), "COALESCE_MAX") && d == 0);
    CHECK(!strcmp(nm_cfg_closest("NCCL_LIBS", &d), "NCCL_LIB"));
    CHECK(!strcmp(nm_cfg_closest("CONFIGURE_FLAG", &d), "CONFIGURE_FLAGS"));

    /* a whole environment: invalid values and unknown names warn once each and keep defaults;
     * script variables and other prefixes are quiet */
    char *env[] = {"NCCLMPI_TIMEOUT=-3", "NCCLMPI_MANAGED=Host", "NCCLMPI_STAT=1", "NCCLMPI_LOG_SUBSYS=INIT,BOGUS",
                   "NCCLMPI_LIB=/x/libncclmpi.so", "NCCLMPI_CONFIGURE_FLAGS=--with-nccl=/opt", "NCCL_DEBUG=INFO",
                   "NCCLMPI_WARN_AFTER=5", "NCCLMPI_STATS=file:out.%r", "NCCLMPI_COALESCE_MAX=0", "PATH=/bin", NULL};
    CHECK(nm_config_parse(env) == 4);
    CHECK(nm_cfg.TIMEOUT == 0 && nm_cfg.WARN_AFTER == 5 && nm_cfg.COALESCE_MAX == 256);
    CHECK(!strcmp(nm_cfg.MANAGED, "host") && !strcmp(nm_cfg.LOG_SUBSYS, "ALL"));
    CHECK(nm_cfg.STATS == NM_STATS_FILE && !strcmp(nm_cfg.stats_file, "out.%r"));
    CHECK(nm_config_parse(empty) == 0 && nm_cfg.STATS == NM_STATS_OFF && !strcmp(nm_cfg.MANAGED, "device"));
    nm_config_load();
}

static void test_table(void)
{
    CHECK(nm_fn_lookup("Allreduce") >= 0);
    CHECK(nm_fn_lookup("MPI_Waitsome") >= 0);
    CHECK(nm_fn_lookup("Allreduce_nonexistent") < 0);
    CHECK(NM_FN_COUNT >= 73);
}

/* NCCLMPI_P2P_ENVELOPE's decision: every assignment of host, CUDA_VISIBLE_DEVICES and GPU
 * presence over 3 ranks (hash values chosen to collide in sign and order) gives every rank the
 * same answer, on exactly when the rule holds. */
static void test_env_vote(void)
{
    const unsigned long long hosts[2] = {0x9e3779b97f4a7c15ull, 0x0000000000000001ull};
    const unsigned long long gpus[2] = {0x7fffffffffffffffull, 0xfffffffffffffffeull};
    enum { R = 3 };
    for (int autom = 0; autom < 2; autom++)
        for (int code = 0; code < 512; code++) {  /* 3 bits per rank: host, gpus, gpu node */
            long long mine[R][NM_ENV_VOTE_N], all[NM_ENV_VOTE_N];
            int same_host = 1, same_gpus = 1, every_gpu = 1;
            for (int r = 0; r < R; r++) {
                const int b = code >> (3 * r);
                nm_env_vote_mine(mine[r], hosts[b & 1], gpus[(b >> 1) & 1], (b >> 2) & 1, autom);
                same_host &= (b & 1) == (code & 1);
                same_gpus &= ((b >> 1) & 1) == ((code >> 1) & 1);
                every_gpu &= (b >> 2) & 1;
            }
            for (int i = 0; i < NM_ENV_VOTE_N; i++) {
                all[i] = mine[0][i];
                for (int r = 1; r < R; r++)
                    if (mine[r][i] > all[i]) all[i] = mine[r][i];
            }
            const char *first = nm_env_vote_off(mine[0], all, autom);
            for (int r = 1; r < R; r++) CHECK(nm_env_vote_off(mine[r], all, autom) == first);
            const int on = same_host && (!autom || (every_gpu && same_gpus));
            CHECK((first == NULL) == on);
        }
}

/* Device point-to-point limits where ranks share GPUs (nm_p2p_limits), against the rule written
 * out case by case: a GPU per rank or more, MPS, or no GPU count: the settings as they are; else
 * envelopes from k x 512 KiB (never below the setting) and no copy kernels, unless set. */
static void test_p2p_limits(void)
{
    const size_t K = 1024, M = 1024 * 1024;
    for (int ranks = 1; ranks <= 9; ranks++)
        for (int gpus = 0; gpus <= 4; gpus++)
            for (int mps = 0; mps < 2; mps++)
                for (int set = 0; set < 4; set++)
                    for (int big = 0; big < 2; big++) {
                        const size_t min_cfg = big ? 8 * M : 8 * K, batch_cfg = 4 * M;
                        const nm_p2p_limits_t l = nm_p2p_limits(ranks, gpus, mps, min_cfg, set & 1, batch_cfg, set >> 1);
                        const int shared = gpus > 0 && ranks > gpus && !mps;
                        const int k = shared ? (ranks + gpus - 1) / gpus : 1;
                        CHECK(l.ranks_per_gpu == k);
                        size_t want_min = min_cfg;
                        if (shared && !(set & 1) && (size_t)k * 512 * K > min_cfg) want_min = (size_t)k * 512 * K;
                        CHECK(l.envelope_min == want_min);
                        CHECK(l.copy_batch == (shared && !(set >> 1) ? 0 : batch_cfg));
                    }
    /* the measured cases: 2 and 4 ranks on one GPU; 8 ranks on 4 GPUs; 4 on 4 */
    CHECK(nm_p2p_limits(2, 1, 0, 8 * K, 0, 4 * M, 0).envelope_min == 1 * M);
    CHECK(nm_p2p_limits(4, 1, 0, 8 * K, 0, 4 * M, 0).envelope_min == 2 * M);
    CHECK(nm_p2p_limits(8, 4, 0, 8 * K, 0, 4 * M, 0).envelope_min == 1 * M);
    CHECK(nm_p2p_limits(4, 4, 0, 8 * K, 0, 4 * M, 0).envelope_min == 8 * K);
    CHECK(nm_p2p_limits(2, 1, 1, 8 * K, 0, 4 * M, 0).copy_batch == 4 * M);
}

/* The fusion plan (route.h, "fused"): which allreduces of a group share an NCCL call, at which
 * offsets. Its inputs are only what every rank shares, so equal inputs must give equal plans; the
 * cases check the rule itself. */
enum { FN = 600 };
static nm_fuse_op_t fops[FN];
static int fb[FN];
static size_t foff[FN], ftot[FN];
static void fset(int i, int kind, int type, int op, size_t count)
{
    fops[i].kind = kind;
    fops[i].nccl_type = type;
    fops[i].nccl_op = op;
    fops[i].count = count;
}

/* MAX and MIN reductions in one NCCL group (route.h): apart only with NCCL 2.19-2.28 at 2 ranks
 * or more. */
static void test_minmax_split(void)
{
    CHECK(nm_minmax_hazard(22803, 3) && nm_minmax_hazard(21901, 8) && nm_minmax_hazard(22809, 2));
    CHECK(!nm_minmax_hazard(22803, 1));  /* one rank: nothing to reduce with */
    CHECK(!nm_minmax_hazard(21803, 4) && !nm_minmax_hazard(22902, 4));  /* before one function, after the fix */
}

static void test_fuse_plan(void)
{
    /* ten int32 sums of 1024 elements at 4 ranks: one call, back to back */
    for (int i = 0; i < 10; i++) fset(i, NM_OPK_ALLREDUCE, ncclInt32, ncclSum, 1024);
    CHECK(nm_fuse_plan(fops, 10, 4, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 1);
    for (int i = 0; i < 10; i++) CHECK(fb[i] == 0 && foff[i] == (size_t)i * 1024);
    CHECK(ftot[0] == 10240);
    CHECK(nm_fuse_plan(fops, 10, 4, NM_FUSE_OFF, 64 << 10, 8, fb, foff, ftot) == 0 && fb[3] == -1);
    /* fewer than min_ops of the pair: none */
    CHECK(nm_fuse_plan(fops, 7, 4, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 0);
    for (int i = 0; i < 7; i++) CHECK(fb[i] == -1);
    /* float sums: exact at 2 ranks only, every size with ALL; one rank: ALL only */
    for (int i = 0; i < 10; i++) fset(i, NM_OPK_ALLREDUCE, ncclFloat32, ncclSum, 1000);
    CHECK(nm_fuse_plan(fops, 10, 4, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 0);
    CHECK(nm_fuse_plan(fops, 10, 3, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 0);
    CHECK(nm_fuse_plan(fops, 10, 2, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 1);
    CHECK(nm_fuse_plan(fops, 10, 1, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 0);
    CHECK(nm_fuse_plan(fops, 10, 1, NM_FUSE_ALL, 64 << 10, 8, fb, foff, ftot) == 1);
    CHECK(nm_fuse_plan(fops, 10, 8, NM_FUSE_ALL, 64 << 10, 8, fb, foff, ftot) == 1 && ftot[0] == 10000);
    /* 16-byte slots: 3 int32 take 4, 1 double takes 2, 5 int8 take 16 */
    for (int i = 0; i < 8; i++) fset(i, NM_OPK_ALLREDUCE, ncclInt32, ncclMax, 3);
    CHECK(nm_fuse_plan(fops, 8, 5, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 1 && foff[7] == 28 && ftot[0] == 32);
    for (int i = 0; i < 8; i++) fset(i, NM_OPK_ALLREDUCE, ncclFloat64, ncclMin, 1);
    CHECK(nm_fuse_plan(fops, 8, 2, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 1 && foff[1] == 2 && ftot[0] == 16);
    for (int i = 0; i < 8; i++) fset(i, NM_OPK_ALLREDUCE, ncclUint8, ncclSum, 5);
    CHECK(nm_fuse_plan(fops, 8, 6, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 1 && foff[1] == 16 && ftot[0] == 128);
    /* two pairs interleaved, numbered by their first operations; operations that cannot take part
     * keep their places and run alone */
    for (int i = 0; i < 20; i++) fset(i, NM_OPK_ALLREDUCE, i % 2 ? ncclInt32 : ncclInt64, ncclSum, 100);
    fset(4, NM_OPK_BCAST, ncclInt64, ncclSum, 100);            /* not an allreduce */
    fset(6, NM_OPK_ALLREDUCE, ncclInt64, ncclSum, 0);          /* empty */
    fset(8, NM_OPK_ALLREDUCE, ncclInt64, ncclSum, 64 << 10);   /* larger than max_bytes */
    fset(10, NM_OPK_ALLREDUCE, NM_UNSUPPORTED, ncclSum, 100);  /* not NCCL's type */
    fset(12, NM_OPK_ALLREDUCE, ncclInt64, NM_UNSUPPORTED, 100);
    fset(14, -1, ncclInt64, ncclSum, 100);                     /* a one-shot kernel */
    CHECK(nm_fuse_plan(fops, 20, 4, NM_FUSE_EXACT, 64 << 10, 4, fb, foff, ftot) == 2);
    CHECK(fb[0] == 0 && fb[1] == 1 && fb[2] == 0 && fb[3] == 1 && foff[2] == 100 && foff[3] == 100);
    for (int i = 4; i <= 14; i += 2) CHECK(fb[i] == -1);
    CHECK(fb[16] == 0 && foff[16] == 200 && fb[18] == 0 && ftot[0] == 400 && ftot[1] == 1000);
    /* the same at min_ops 6: the int64 pair has only 4 left, so only the int32 one is a call */
    CHECK(nm_fuse_plan(fops, 20, 4, NM_FUSE_EXACT, 64 << 10, 6, fb, foff, ftot) == 1 && fb[0] == -1 && fb[1] == 0);
    /* more than NM_FUSE_BUCKET_MAX bytes: a second call for the rest */
    for (int i = 0; i < FN; i++) fset(i, NM_OPK_ALLREDUCE, ncclUint32, ncclSum, 16384);
    CHECK(nm_fuse_plan(fops, FN, 4, NM_FUSE_EXACT, 64 << 10, 8, fb, foff, ftot) == 2);
    CHECK(fb[511] == 0 && fb[512] == 1 && foff[512] == 0 && ftot[0] == 512u * 16384 && ftot[1] == 88u * 16384);
}

static nm_pipe_in_t pipe_in(int kind, long long count, unsigned long long esize)
{
    nm_pipe_in_t in;
    memset(&in, 0, sizeof(in));
    in.kind = kind;
    in.type_known = 1;
    in.contig = 1;
    in.esize = esize;
    in.count = count;
    in.chunk = 4u << 20;
    return in;
}

/* the staged route's paths (route.h): the pipeline's chunks, the shared GPU, the deferred send */
static void test_stage_paths(void)
{
    /* 16 MiB of doubles: 4 chunks of 4 MiB, in elements of the datatype */
    nm_pipe_in_t in = pipe_in(NM_OPK_ALLREDUCE, 2 << 20, 8);
    nm_pipe_t p = nm_stage_pipeline(&in);
    CHECK(p.applies && !p.bytes && p.unit == 8 && p.units == 2u << 20 && p.per == 512u << 10 && p.nchunks == 4);
    /* two chunks or fewer: staged whole; just above: pipelined */
    in.count = 1 << 20;
    CHECK(!nm_stage_pipeline(&in).applies);
    in.count = (1 << 20) + 1;
    CHECK(nm_stage_pipeline(&in).applies && nm_stage_pipeline(&in).nchunks == 3);
    /* (4b) never on an intercommunicator, nonblocking, persistent or with NCCLMPI_AGREE */
    in = pipe_in(NM_OPK_ALLREDUCE, 2 << 20, 8);
    in.inter = 1;
    CHECK(!nm_stage_pipeline(&in).applies);
    in = pipe_in(NM_OPK_REDUCE, 2 << 20, 8);
    in.inter = 1;
    CHECK(!nm_stage_pipeline(&in).applies);
    in = pipe_in(NM_OPK_BCAST, 2 << 20, 8);
    in.inter = 1;
    CHECK(!nm_stage_pipeline(&in).applies);
    in = pipe_in(NM_OPK_ALLREDUCE, 2 << 20, 8);
    in.flags = NM_OPF_NB;
    CHECK(!nm_stage_pipeline(&in).applies);
    in.flags = NM_OPF_PERS;
    CHECK(!nm_stage_pipeline(&in).applies);
    in.flags = 0;
    in.agree = 1;
    CHECK(!nm_stage_pipeline(&in).applies);
    in = pipe_in(NM_OPK_ALLGATHER, 2 << 20, 8);
    CHECK(!nm_stage_pipeline(&in).applies);
    in = pipe_in(NM_OPK_ALLREDUCE, 2 << 20, 8);
    in.type_known = 0;
    CHECK(!nm_stage_pipeline(&in).applies);
    /* (4c) a 24-byte element (contiguous(3, MPI_DOUBLE)): whole elements, a chunk boundary never
     * inside one, every element in exactly one chunk */
    in = pipe_in(NM_OPK_ALLREDUCE, 12000000 / 24, 24);
    p = nm_stage_pipeline(&in);
    CHECK(p.applies && p.unit == 24 && p.per == (4u << 20) / 24 && p.units == 500000);
    CHECK(p.per * p.unit % 24 == 0 && (p.nchunks - 1) * p.per < p.units && p.nchunks * p.per >= p.units);
    /* an element larger than a chunk: one element per chunk */
    in = pipe_in(NM_OPK_ALLREDUCE, 3, 5u << 20);
    p = nm_stage_pipeline(&in);
    CHECK(p.applies && p.per == 1 && p.nchunks == 3 && p.unit == 5u << 20);
    /* a reduction on a datatype with gaps: staged whole (its op must get whole elements of it) */
    in = pipe_in(NM_OPK_ALLREDUCE, 2 << 20, 8);
    in.contig = 0;
    CHECK(!nm_stage_pipeline(&in).applies);
    /* Bcast moves bytes: any layout (each rank packs its own), chunks of exactly the chunk size */
    in = pipe_in(NM_OPK_BCAST, 1 << 20, 24);
    in.contig = 0;
    p = nm_stage_pipeline(&in);
    CHECK(p.applies && p.bytes && p.unit == 1 && p.units == 24u << 20 && p.per == 4u << 20 && p.nchunks == 6);
    /* (4d) above 2 GiB: 64-bit counts, every chunk's count fits an int */
    in = pipe_in(NM_OPK_BCAST, 3LL << 30, 2);
    in.chunk = NM_STAGE_CHUNK_MAX;
    p = nm_stage_pipeline(&in);
    CHECK(p.applies && p.units == 6ULL << 30 && p.per == (unsigned long long)NM_STAGE_CHUNK_MAX && p.nchunks == 6);
    in = pipe_in(NM_OPK_ALLREDUCE, 1LL << 34, 8);
    in.chunk = 1ULL << 35; /* (beyond the setting's bound: still an int per chunk) */
    p = nm_stage_pipeline(&in);
    CHECK(p.applies && p.per <= 2147483647ULL && p.nchunks * p.per >= p.units);
    in = pipe_in(NM_OPK_ALLREDUCE, 1LL << 62, 8); /* (bytes overflow 64 bits: never) */
    CHECK(!nm_stage_pipeline(&in).applies);
    int n = 0;
    CHECK(nm_int_fits(2147483647ULL, &n) && n == 2147483647);
    CHECK(!nm_int_fits(2147483648ULL, &n) && n == 2147483647);
    CHECK(!nm_int_fits(1ULL << 32, NULL));
    /* an envelope's first 64 bytes out of a 3 GiB receive buffer of 24-byte elements: 3 of them */
    CHECK(nm_prefix_elems(134217728, 24, 64) == 3);
    CHECK(nm_prefix_elems(2, 24, 64) == 2);
    CHECK(nm_prefix_elems(100, 8, 64) == 8);
    CHECK(nm_prefix_elems(0, 8, 64) == 0);
    /* an unpack of 3 GiB in pieces of at most 1 GiB of whole elements */
    CHECK(nm_piece_elems(24, 1ULL << 30) == (int)((1ULL << 30) / 24));
    CHECK(nm_piece_elems(3ULL << 30, 1ULL << 30) == 1);
    CHECK(nm_piece_elems(1, 1ULL << 40) == 2147483647);
    CHECK(nm_piece_elems(0, 16) == 16);

    nm_shared_in_t sh;
    memset(&sh, 0, sizeof(sh));
    sh.window = 1;
    sh.shape_ok = 1;
    sh.total = 1 << 20;
    sh.min_bytes = 1 << 20;
    CHECK(nm_shared_applies(&sh));
    sh.total--;
    CHECK(!nm_shared_applies(&sh));
    sh.total++;
    sh.shape_ok = 0;
    CHECK(!nm_shared_applies(&sh));
    sh.shape_ok = 1;
    sh.window = 0;
    CHECK(!nm_shared_applies(&sh));
    sh.window = 1;
    sh.inter = 1;
    CHECK(!nm_shared_applies(&sh));
    sh.inter = 0;
    sh.flags = NM_OPF_NB;
    CHECK(!nm_shared_applies(&sh));
    sh.flags = NM_OPF_PERS;
    CHECK(!nm_shared_applies(&sh));
    sh.flags = 0;
    sh.agree = 1;
    CHECK(!nm_shared_applies(&sh));
    sh.agree = 0;
    sh.force_staged = 1;
    CHECK(!nm_shared_applies(&sh));

    nm_defer_in_t df = {1, 1, NM_OPK_SEND, NM_OPF_NB, 1, 1};
    CHECK(nm_env_send_defers(&df));
    df.may_hold = 0; /* MPI_THREAD_MULTIPLE */
    CHECK(!nm_env_send_defers(&df));
    df.may_hold = 1;
    df.env_active = 0;
    CHECK(!nm_env_send_defers(&df));
    df.env_active = 1;
    df.flags = 0; /* blocking */
    CHECK(!nm_env_send_defers(&df));
    df.flags = NM_OPF_NB | NM_OPF_PERS;
    CHECK(!nm_env_send_defers(&df));
    df.flags = NM_OPF_NB;
    df.send_mode = 0; /* MPI_Ibsend */
    CHECK(!nm_env_send_defers(&df));
    df.send_mode = 1;
    df.kind = NM_OPK_RECV;
    CHECK(!nm_env_send_defers(&df));
    df.kind = NM_OPK_SEND;
    df.queue = 0; /* outside a group, no NCCLMPI_P2P_SEND_QUEUE: sent at its call (progress rule) */
    CHECK(!nm_env_send_defers(&df));
}

/* a blocking device MPI_Sendrecv to the rank itself: a copy only where its receive can take
 * nothing but its own send */
static void test_self_copy(void)
{
    const nm_self_in_t base = {NM_OPK_SENDRECV, 0, 0, 0, 2, 4, 2, 2, 0, 0, 7, 7, 1, 1, 4096, 4096, 0};
    nm_self_in_t s = base;
    CHECK(nm_p2p_self_copy(&s));
    s.rbytes = 8192; /* a longer receive buffer: the message's bytes */
    CHECK(nm_p2p_self_copy(&s));
    s.rbytes = 4095; /* truncated: the real way reports it */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.kind = NM_OPK_SENDRECV_REPLACE; /* its own message back into its buffer: nothing to copy */
    CHECK(nm_p2p_self_copy(&s));
    s.contig = 0; /* any datatype */
    CHECK(nm_p2p_self_copy(&s));
    s.device = 0;
    CHECK(!nm_p2p_self_copy(&s));
    s.device = 1, s.rtag = 8;
    CHECK(!nm_p2p_self_copy(&s));
    s.rtag = 7, s.held = 1;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.kind = NM_OPK_SEND;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.flags = NM_OPF_NB; /* MPI_Isendrecv: matched later, when other sends may come first */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.flags = NM_OPF_PERS;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.thread_multiple = 1; /* another thread's send to itself may be taken first */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.inter = 1;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.dest = 3;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.source = 1;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.source_any = 1; /* any source, four ranks: another rank's message may come first */
    CHECK(!nm_p2p_self_copy(&s));
    s.size = 1, s.rank = s.dest = 0; /* one rank: only itself */
    CHECK(nm_p2p_self_copy(&s));
    s = base, s.rtag = 8;
    CHECK(!nm_p2p_self_copy(&s));
    s.tag_any = 1;
    CHECK(nm_p2p_self_copy(&s));
    s = base, s.device = 0; /* host memory (or two devices) */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.contig = 0; /* a type with gaps: the datatype path */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.held = 1; /* a probe took a message out of matching: the receive may take it */
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.self_sent = 1; /* an earlier send to itself went to the real MPI: it may be pending */
    CHECK(!nm_p2p_self_copy(&s));
    s.kind = NM_OPK_SENDRECV_REPLACE;
    CHECK(!nm_p2p_self_copy(&s));
    s = base, s.sbytes = 0; /* an empty message: nothing to copy, the status still says so */
    CHECK(nm_p2p_self_copy(&s));
}

/* a one-shot op in an engine group: NCCL's where NCCL can run it, its kernel where not */
static void test_oneshot_keeps(void)
{
    CHECK(nm_oneshot_keeps(1, 1, 1, 1) == 1); /* a group of one: the kernel */
    CHECK(nm_oneshot_keeps(1, 0, 0, 0) == 1);
    CHECK(nm_oneshot_keeps(2, 1, 1, 1) == 0); /* a reduction NCCL has: NCCL's group */
    CHECK(nm_oneshot_keeps(64, 0, 0, 0) == 0); /* a broadcast: NCCL's */
    CHECK(nm_oneshot_keeps(2, 1, 0, 1) == 1); /* a type NCCL lacks: the kernel */
    CHECK(nm_oneshot_keeps(2, 1, 1, 0) == 1); /* an op NCCL lacks: the kernel */
}

/* NCCLMPI_RENDEZVOUS: AUTO follows MPI_THREAD_MULTIPLE on any rank; ON and OFF whatever it is */
static void test_rendezvous(void)
{
    CHECK(nm_launch_rendezvous(NM_RDV_AUTO, 1) == 1);
    CHECK(nm_launch_rendezvous(NM_RDV_AUTO, 0) == 0);
    CHECK(nm_launch_rendezvous(NM_RDV_ON, 0) == 1);
    CHECK(nm_launch_rendezvous(NM_RDV_ON, 1) == 1);
    CHECK(nm_launch_rendezvous(NM_RDV_OFF, 1) == 0);
    CHECK(nm_launch_rendezvous(NM_RDV_OFF, 0) == 0);
    /* the setting's index as config.def's LEVEL row spells it */
    char *off[] = {"NCCLMPI_RENDEZVOUS=off", NULL}, *on[] = {"NCCLMPI_RENDEZVOUS=On", NULL}, *none[] = {NULL};
    CHECK(nm_config_parse(off) == 0 && nm_cfg.RENDEZVOUS == NM_RDV_OFF);
    CHECK(nm_config_parse(on) == 0 && nm_cfg.RENDEZVOUS == NM_RDV_ON);
    CHECK(nm_config_parse(none) == 0 && nm_cfg.RENDEZVOUS == NM_RDV_AUTO); /* the default */
    nm_config_load();
}

/* NCCLMPI_RENDEZVOUS's turns: which calls take one, and a busy turn's route */
static void test_turns(void)
{
    nm_route_in_t in = dev_coll(NM_OPK_ALLREDUCE);
    CHECK(nm_turn_applies(&in, nm_route(&in)) == 1); /* an NCCL launch */
    in.flags = NM_OPF_NB;
    CHECK(nm_turn_applies(&in, nm_route(&in)) == 0); /* nonblocking: none */
    in.flags = NM_OPF_PERS;
    CHECK(nm_turn_applies(&in, nm_route(&in)) == 0);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.oneshot = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ONESHOT && nm_turn_applies(&in, nm_route(&in)) == 1);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.cap = NM_CAP_UNKNOWN; /* a creation: every rank takes the turn first */
    nm_decision_t d = nm_route(&in);
    CHECK((d.act & NM_ACT_CREATE) && nm_turn_applies(&in, d) == 1);
    in.busy = 1; /* some process had another thread's NCCL work: staged, nothing created */
    d = nm_route(&in);
    CHECK(d.route == NCCLMPI_ROUTE_STAGED && d.why == NM_WHY_THREADS && d.act == 0);
    CHECK(nm_turn_applies(&in, d) == 0);
    in.cap = NM_CAP_READY;
    in.oneshot = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_STAGED && nm_route(&in).why == NM_WHY_THREADS);
    in.cap = NM_CAP_FAILED; /* a failed communicator still fails the call */
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_ERROR);
    /* host buffers on a READY communicator: the real MPI, no turn; a creation takes one */
    in = dev_coll(NM_OPK_BCAST);
    in.rank_kind = NM_RK_HOST;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_HOST && nm_turn_applies(&in, nm_route(&in)) == 0);
    /* a zero-count carrier (ranks without data take the real MPI): no turn */
    in = dev_coll(NM_OPK_GATHERV);
    d = nm_route(&in);
    CHECK(d.route == NCCLMPI_ROUTE_NCCL && (d.act & NM_ACT_CARRIER) && nm_turn_applies(&in, d) == 0);
    /* point-to-point and intercommunicators: none */
    in = dev_coll(NM_OPK_SEND);
    CHECK(nm_turn_applies(&in, nm_route(&in)) == 0);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.cap = NM_CAP_INTER;
    CHECK(nm_turn_applies(&in, nm_route(&in)) == 0);
    /* a connection of every peer (a cold communicator's blocking alltoall) takes one */
    in = dev_coll(NM_OPK_ALLTOALL);
    in.peers_cold = 1;
    d = nm_route(&in);
    CHECK((d.act & NM_ACT_CONNECT) && nm_turn_applies(&in, d) == 1);
    /* a communicator of MPIX streams: none, neither for a launch nor for a creation */
    in.stream_comm = 1;
    CHECK(nm_turn_applies(&in, d) == 0);
    in = dev_coll(NM_OPK_ALLREDUCE);
    in.stream_comm = 1;
    CHECK(nm_route(&in).route == NCCLMPI_ROUTE_NCCL && nm_turn_applies(&in, nm_route(&in)) == 0);
    in.cap = NM_CAP_UNKNOWN;
    d = nm_route(&in);
    CHECK((d.act & NM_ACT_CREATE) && nm_turn_applies(&in, d) == 0);
}

int main(void)
{
    test_route();
    test_route_agreement();
    test_turns();
    test_maps();
    test_config();
    test_table();
    test_env_vote();
    test_p2p_limits();
    test_fuse_plan();
    test_minmax_split();
    test_stage_paths();
    test_rendezvous();
    test_oneshot_keeps();
    test_self_copy();
    if (failures) {
        fprintf(stderr, "test_route: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_route: all checks passed (%d rank-agreement cases)\n", checked_cases);
    return 0;
}
