// ncclmpi: collectives on device buffers through NCCL. One entry point; each collective is a
// short body run by ProcessGroup::run (ordering, group, completion are there, once).
#ifndef NM_CORE_COLL_NCCL_H
#define NM_CORE_COLL_NCCL_H
#include "core/comm/process_group.h"
#include "core/engine/task.h"
#include "route/nm_op.h"

namespace ncclmpi {

// Blocking when task == nullptr. o has been validated and routed to NCCL.
nm_status_t coll_nccl(ProcessGroup &pg, const nm_op_t *o, Task *task);

}  // namespace ncclmpi
#endif
