// ncclmpi: small allreduces of one launched group sharing one NCCL call (fuse.h).
#include "core/tl/nccl/fuse.h"

#include <string.h>

#include "core/cuda/kernels.h"
#include "core/tl/nccl/nccl_api.h"
#include "route/route.h"
#include "util/config.h"
#include "util/log.h"
#include "util/stats.h"

namespace ncclmpi {

static int fuse_mode()
{
    // (a function-local static: the setting is read once)
    static const int mode = !strcmp(nm_cfg.FUSE, "off") ? NM_FUSE_OFF : !strcmp(nm_cfg.FUSE, "all") ? NM_FUSE_ALL : NM_FUSE_EXACT;
    return mode;
}

bool Fusion::plan(Op *const *ops, int n, int comm_size)
{
    ncalls_ = nfused_ = 0;
    n_ = n;
    if (n < nm_cfg.FUSE_MIN || !nm_fuse_possible(comm_size, fuse_mode())) return false;
    // what every rank of the group shares (route.h): the kind, the signature's NCCL type, the op,
    // the NCCL element count; a one-shot op (agreed) is no NCCL call
    std::vector<nm_fuse_op_t> &in = in_;
    in.resize((size_t)n);
    for (int i = 0; i < n; i++) {
        const Op &op = *ops[i];
        const size_t es = nm_nccl_type_size(op.rd.nccl_type);
        in[i].kind = op.oneshot ? -1 : op.o.kind;
        in[i].nccl_type = op.rd.nccl_type;
        in[i].nccl_op = nm_map_op(op.o.op);
        in[i].count = es ? (size_t)op.o.rcount * op.rd.size / es : 0;
    }
    bytes_.resize((size_t)n);
    bucket_.resize((size_t)n);
    offset_.resize((size_t)n);
    total_.resize((size_t)n);
    ncalls_ = nm_fuse_plan(in.data(), n, comm_size, fuse_mode(), (size_t)nm_cfg.FUSE_MAX, (int)nm_cfg.FUSE_MIN,
                           bucket_.data(), offset_.data(), total_.data());
    if (!ncalls_) return false;
    slots_.assign((size_t)n, FuseSlot{});
    type_.resize((size_t)ncalls_);
    nop_.resize((size_t)ncalls_);
    es_.resize((size_t)ncalls_);
    buf_.assign((size_t)ncalls_, 0);
    first_ = -1;
    for (int i = 0; i < n; i++) {
        const int b = bucket_[i];
        if (b < 0) continue;
        nfused_++;
        if (first_ < 0) first_ = i;
        type_[b] = in[i].nccl_type;
        nop_[b] = in[i].nccl_op;
        es_[b] = nm_nccl_type_size(in[i].nccl_type);
        bytes_[i] = in[i].count * es_[b];
    }
    return true;
}

// call b's part of the group's buffer: its bytes, to a 256-byte boundary
size_t Fusion::part(int b) const { return (total_[b] * es_[b] + 255) / 256 * 256; }

nm_status_t Fusion::prepare(Op *const *ops, ProcessGroup &pg, CUstream s, std::vector<NcclRec> *recs)
{
    std::vector<nm_copyv_region_t> &r = regions_;
    r.clear();
    // one buffer for the calls, each at a 256-byte boundary: the process group's, kept between
    // groups (its stream orders the uses), or one freed with the first op's scratch
    size_t bytes = 0;
    for (int b = 0; b < ncalls_; b++) bytes += part(b);
    CUdeviceptr base = s == pg.stream() ? pg.stream_buffer(bytes) : 0;
    if (!base) {
        if (cu.cuMemAllocAsync(&base, bytes, s) != CUDA_SUCCESS) {
            NM_ERROR(COLL, "cannot allocate %zu bytes of device memory for %d fused allreduces", bytes, nfused_);
            return NM_ERR_NO_MEM;
        }
        ops[first_]->scratch.push_back(base);  // freed with that op's scratch, after the group's work
    }
    for (int b = 0; b < ncalls_; b++) {
        buf_[b] = base;
        base += part(b);
    }
    for (int i = 0; i < n_; i++) {
        const int b = bucket_[i];
        if (b < 0) continue;
        if (!slots_[i].src || !slots_[i].dst) return NM_ERR_INTERNAL;  // (its body did not reach its call)
        r.push_back(nm_copyv_region_t{(char *)buf_[b] + offset_[i] * es_[b], slots_[i].src, bytes_[i]});
    }
    NM_CU_CHECK(copy_regions(pg.ctx(), r.data(), r.size(), s), return NM_ERR_CUDA);
    for (int b = 0; b < ncalls_; b++)
        recs->push_back(NcclRec{NcclRec::ALLREDUCE, type_[b], nop_[b], -1, (void *)buf_[b], (void *)buf_[b], total_[b]});
    for (int i = 0; i < n_; i++)
        if (bucket_[i] >= 0) NM_COUNT_ROUTE(ops[i]->o.fn, NCCLMPI_ROUTE_FUSED);
    __atomic_add_fetch(&nm_stats.fused_calls, (uint64_t)ncalls_, __ATOMIC_RELAXED);
    NM_TRACE(COLL, "%d allreduces of a group of %d share %d NCCL call(s)", nfused_, n_, ncalls_);
    return NM_OK;
}

nm_status_t Fusion::unpack(ProcessGroup &pg, CUstream s)
{
    std::vector<nm_copyv_region_t> &r = regions_;
    r.clear();
    for (int i = 0; i < n_; i++) {
        const int b = bucket_[i];
        if (b < 0) continue;
        r.push_back(nm_copyv_region_t{slots_[i].dst, (const char *)buf_[b] + offset_[i] * es_[b], bytes_[i]});
    }
    NM_CU_CHECK(copy_regions(pg.ctx(), r.data(), r.size(), s), return NM_ERR_CUDA);
    return NM_OK;
}

}  // namespace ncclmpi
