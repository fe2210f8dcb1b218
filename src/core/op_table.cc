// ncclmpi: the op table, built from NM_OPK_TABLE. Every kind needs buffers_<name> (a missing one
// is a link error) and every kind marked NM_KF_NCCL needs an NCCL body below (a missing one is a
// static_assert), so the parallel switches of earlier versions cannot drift apart.
#include "core/op_table.h"

#include "core/tl/nccl/coll_nccl.h"

namespace ncclmpi {

#define NM_DECLARE_BUFFERS(K, name, facts) int buffers_##name(const OpCtx &, BufRef *);
NM_OPK_TABLE(NM_DECLARE_BUFFERS)
#undef NM_DECLARE_BUFFERS

template <int K>
constexpr NcclFn nccl_body() { return nullptr; }
#define NM_NCCL_BODY(K, name)                                                                 \
    nm_status_t nccl_##name(NcclCall &);                                                      \
    template <>                                                                               \
    constexpr NcclFn nccl_body<NM_OPK_##K>() { return &nccl_##name; }
NM_NCCL_BODY(ALLREDUCE, allreduce)
NM_NCCL_BODY(REDUCE, reduce)
NM_NCCL_BODY(BCAST, bcast)
NM_NCCL_BODY(ALLGATHER, allgather)
NM_NCCL_BODY(ALLGATHERV, allgatherv)
NM_NCCL_BODY(ALLTOALL, alltoall)
NM_NCCL_BODY(ALLTOALLV, alltoallv)
NM_NCCL_BODY(REDUCE_SCATTER, reduce_scatter)
NM_NCCL_BODY(REDUCE_SCATTER_BLOCK, reduce_scatter_block)
NM_NCCL_BODY(GATHER, gather)
NM_NCCL_BODY(GATHERV, gatherv)
NM_NCCL_BODY(SCATTER, scatter)
NM_NCCL_BODY(SCATTERV, scatterv)
#undef NM_NCCL_BODY

#define NM_CHECK_ROW(K, name, facts)                                                          \
    static_assert(!((facts)&NM_KF_NCCL) || nccl_body<NM_OPK_##K>() != nullptr,                \
                  "op kind " #name " is marked NM_KF_NCCL but has no NCCL body");             \
    static_assert(((facts)&NM_KF_NCCL) || nccl_body<NM_OPK_##K>() == nullptr,                 \
                  "op kind " #name " has an NCCL body but is not marked NM_KF_NCCL");
NM_OPK_TABLE(NM_CHECK_ROW)
#undef NM_CHECK_ROW

static const OpRow rows[NM_OPK_COUNT] = {
#define NM_ROW(K, name, facts) {#name, (facts), &buffers_##name, nccl_body<NM_OPK_##K>()},
    NM_OPK_TABLE(NM_ROW)
#undef NM_ROW
};

const OpRow &op_row(int kind) { return rows[kind >= 0 && kind < NM_OPK_COUNT ? kind : 0]; }

}  // namespace ncclmpi
