// ncclmpi: the collective exchange of device windows' CUDA IPC handles (ipc_share.h).
#include "core/cuda/ipc_share.h"

#include <string.h>
#include <unistd.h>

#include <vector>

#include "core/comm/process_group.h"
#include "core/cuda/cuda_api.h"
#include "route/route.h"

namespace ncclmpi {

bool ipc_share(MPI_Comm comm, int n, int rank, CUcontext ctx, CUdeviceptr mine, unsigned long long extra,
               CUdeviceptr *peer, unsigned long long *extras, std::string *why)
{
    struct {
        int ok;
        unsigned long long host;  // ranks on one node only (a CUDA IPC handle means nothing elsewhere)
        unsigned long long extra;
        CUipcMemHandle h;
    } me;
    memset(&me, 0, sizeof(me));
    char hn[256] = "";
    gethostname(hn, sizeof(hn) - 1);
    me.host = nm_hash_str(hn);
    me.extra = extra;
    if (mine) {
        DeviceGuard g(ctx);
        const CUresult r = cu.cuIpcGetMemHandle(&me.h, mine);
        if (r == CUDA_SUCCESS) me.ok = 1;
        else *why = std::string("cuIpcGetMemHandle: ") + cuda_errstr(r);
    }
    std::vector<decltype(me)> all((size_t)n);
    PMPI_Allgather(&me, sizeof(me), MPI_BYTE, all.data(), sizeof(me), MPI_BYTE, comm);
    int ok = me.ok;
    for (int q = 0; q < n; q++) {
        if (extras) extras[q] = all[q].extra;
        if (!ok) continue;
        if (!all[q].ok) {
            ok = 0;
            *why = "rank " + std::to_string(q) + " has no window";
        } else if (all[q].host != me.host) {
            ok = 0;
            *why = "rank " + std::to_string(q) + " is on another host";
        }
    }
    for (int q = 0; q < n; q++) peer[q] = q == rank ? mine : 0;
    if (ok) {
        DeviceGuard g(ctx);
        for (int q = 0; q < n && ok; q++) {
            if (q == rank) continue;
            const CUresult r = cu.cuIpcOpenMemHandle(&peer[q], all[q].h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            if (r != CUDA_SUCCESS) {
                ok = 0;
                peer[q] = 0;
                *why = "cuIpcOpenMemHandle of rank " + std::to_string(q) + "'s window: " + cuda_errstr(r);
            }
        }
    }
    int all_ok = 0;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (all_ok) return true;
    if (ok) *why = "another rank could not map every window";
    ipc_unshare(ctx, n, rank, peer);
    return false;
}

void ipc_unshare(CUcontext ctx, int n, int rank, CUdeviceptr *peer)
{
    DeviceGuard g(ctx);
    for (int q = 0; q < n; q++)
        if (peer[q] && q != rank) {
            cu.cuIpcCloseMemHandle(peer[q]);
            peer[q] = 0;
        }
}

}  // namespace ncclmpi
