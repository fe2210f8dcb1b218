#!/bin/sh
# intercomm.sh BUILDDIR: collectives on intercommunicators with device buffers of the stand-in CUDA
# driver (test/unit/intercomm_prog.c: the remote group's blocks, MPI_ROOT and MPI_PROC_NULL roots,
# groups of different sizes, the merged intracommunicator; Allreduce, Reduce with a NULL sendbuf at
# MPI_ROOT and Bcast of 16 MiB, above the staged pipeline's threshold), each compared with the real MPI's call
# on host copies, at 2 to 4 ranks, and with NCCLMPI_AGREE=1 (every blocking collective votes).
b=$1
d="$b/intercomm_test"
prog="$b/test/unit/intercomm_prog"
. "$(dirname "$0")/stand_in.sh"
stand_in intercomm "$b" "$d" "$prog"
fail=0
for np in 2 3 4; do
  NCCLMPI_STATS=1 stand_in_run intercomm_prog "$b" "$d" "default settings" $np "$prog" || { fail=1; continue; }
  # the calls where every rank has data took the device route (staged), never the host's (a
  # rooted call's MPI_PROC_NULL ranks have none: the host route is theirs)
  awk '/\[ncclmpi\] function/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
       /^\[ncclmpi\] [A-Z]/ && col["staged"] {
         n = 0; for (i = 1; i <= NF; i++) if ($i !~ /^\[[0-9]/ || i == 1) f[++n] = $i  # (per-rank ranges dropped)
         name = tolower(f[2]); host = f[col["host"]]; staged = f[col["staged"]]
         if (name ~ /^i?(allgather|alltoall)v?$/ && host != 0) {print "intercomm: FAIL: " f[2] " on the host route " host " times"; bad = 1}
         if (name ~ /^i?(allreduce|allgather|alltoall|bcast|gather|scatter|reduce)v?$/) {seen[name] = staged; k++}
       }
       END {for (x in seen) if (seen[x] == 0) {print "intercomm: FAIL: " x " never staged"; bad = 1}
            if (k < 17) {print "intercomm: FAIL: route counts of " k " collectives"; bad = 1}; exit bad}' "$d/err" || fail=1
done
NCCLMPI_AGREE=1 stand_in_run intercomm_prog "$b" "$d" "NCCLMPI_AGREE=1" 3 "$prog" || fail=1
INTERCOMM_SPLIT=3 stand_in_run intercomm_prog "$b" "$d" "groups of 3 and 1" 4 "$prog" || fail=1
exit $fail
