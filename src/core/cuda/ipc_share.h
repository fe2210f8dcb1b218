// ncclmpi: device windows that every rank of a communicator maps (the one-shot kernels' and the
// shared-GPU collectives'): the collective exchange of their CUDA IPC handles.
#ifndef NM_CORE_CUDA_IPC_SHARE_H
#define NM_CORE_CUDA_IPC_SHARE_H
#include <cuda.h>
#include <mpi.h>

#include <string>

namespace ncclmpi {

// Collective over comm (n ranks, this one `rank`): every rank publishes whether it has a window
// (`mine`, 0: none, *why says why), its host and a value `extra`; each rank maps every peer's
// window (peer[q]; peer[rank] = mine) in context ctx, and the ranks agree (one allreduce) that all
// did: true on every rank, or false on every rank with no mapping kept (*why: this rank's reason).
// extras[q] (n of them, may be null) gets rank q's value. Ranks on one host only.
bool ipc_share(MPI_Comm comm, int n, int rank, CUcontext ctx, CUdeviceptr mine, unsigned long long extra,
               CUdeviceptr *peer, unsigned long long *extras, std::string *why);
// Closes the peers' mappings ipc_share made (peer[rank] is left alone).
void ipc_unshare(CUcontext ctx, int n, int rank, CUdeviceptr *peer);

}  // namespace ncclmpi
#endif
