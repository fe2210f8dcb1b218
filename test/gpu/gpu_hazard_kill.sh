#!/bin/sh
# gpu_hazard_kill.sh BUILDDIR NP: runs "gpu_hazard kill" (rank 1 SIGKILLs itself before its 50th
# device MPI_Allreduce on MPI_COMM_WORLD, which has MPI_ERRORS_RETURN) with libncclmpi preloaded,
# NCCLMPI_TIMEOUT=5 and at most 60 s. Passes iff every surviving rank printed
# "gpu_hazard kill: rank R got error: ..." within 15 s of the kill. Exit 77 without a GPU, or
# where ranks share a GPU (no NCCL route).
#
# Open MPI 4.1 aborts the whole job when a process dies. --enable-recovery keeps the others
# running; orte_abort_on_non_zero_status=0 alone is not enough: the first survivor that exits
# without MPI_Finalize then aborts the job and kills the rest before they can report.
# NM_HAZARD_PROG: another build of the program (test/unit/hazard.sh: the stand-ins), run without
# the GPU probe.
b=$1
np=${2:-3}
prog=${NM_HAZARD_PROG:-"$b/test/gpu/gpu_hazard"}
[ -n "${NM_HAZARD_PROG:-}" ] || "$b/test/gpu/gpu_probe" || exit $?
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
NCCLMPI_TIMEOUT=5 timeout 60 "$b/test/run_mpi.sh" "$np" preload --enable-recovery \
    --mca orte_abort_on_non_zero_status 0 "$prog" kill >"$out" 2>&1
rc=$?
cat "$out"
# ranks that share a GPU run staged, in the real MPI: a dead peer is its to report (design.md)
grep -q "^gpu_hazard kill: skipped" "$out" && exit 77
[ "$rc" -eq 124 ] && echo "gpu_hazard_kill: mpirun still running after 60 s: killed"
# rank 1:     gpu_hazard kill: rank 1 raising SIGKILL at <epoch s>
# survivors:  gpu_hazard kill: rank R got error: <MPI_Error_string>
#             gpu_hazard kill: rank R error at <epoch s> (call N)
awk -v np="$np" '
/^gpu_hazard kill: rank 1 raising SIGKILL at / { tk = $NF }
/^gpu_hazard kill: rank [0-9]+ got error: / { got[$4] = 1 }
/^gpu_hazard kill: rank [0-9]+ error at / { te[$4] = $7 }
END {
    if (tk == "") { print "gpu_hazard_kill: FAIL: rank 1 never reached the kill"; exit 1 }
    bad = 0
    for (r = 0; r < np; r++) {
        if (r == 1) continue
        if (!(r in got) || !(r in te)) { printf "gpu_hazard_kill: FAIL: rank %d reported no error\n", r; bad = 1; continue }
        dt = te[r] - tk
        if (dt > 15) { printf "gpu_hazard_kill: FAIL: rank %d got its error %.1f s after the kill (limit 15 s)\n", r, dt; bad = 1 }
        else printf "gpu_hazard_kill: rank %d got its error %.1f s after the kill\n", r, dt
    }
    print (bad ? "gpu_hazard_kill: FAIL" : "gpu_hazard_kill: OK")
    exit bad
}' "$out"
