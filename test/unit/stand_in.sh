# stand_in.sh, sourced by the unit scripts that run ncclmpi on the stand-in CUDA driver and NCCL
# (test/unit/fake_cuda.c, fake_nccl.c):
#   stand_in NAME BUILDDIR DIR [FILE...]
# makes DIR afresh with the stand-ins under the names ncclmpi and applications load
# (DIR/libcuda.so.1, DIR/libnccl.so.2), drops the caller's NCCLMPI_* settings, sets Open MPI up
# for a container (shared memory, no UCX or OFI), NCCLMPI_NCCL_LIB and NCCLMPI_CUDA_LIB to the
# stand-ins and NM_TEST_PRELOAD (test/run_mpi.sh) to the driver's; exits 77
# (skipped) when a FILE or a stand-in is not built.
stand_in() {
  _si_name=$1 _si_b=$2 _si_d=$3
  shift 3
  rm -rf "$_si_d"; mkdir -p "$_si_d"
  for _si_v in $(env | sed -n 's/^\(NCCLMPI_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$_si_v"; done
  for _si_f in "$@" "$_si_b/test/unit/.libs/libfakecuda.so" "$_si_b/test/unit/.libs/libfakenccl.so"; do
    [ -e "$_si_f" ] || { echo "$_si_name: $_si_f not built"; exit 77; }
  done
  ln -s "$_si_b/test/unit/.libs/libfakecuda.so" "$_si_d/libcuda.so.1"
  ln -s "$_si_b/test/unit/.libs/libfakenccl.so" "$_si_d/libnccl.so.2"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl="self,vader" OMPI_MCA_pml="^ucx"
  export OMPI_MCA_mtl="^ofi" OMPI_MCA_osc="^ucx" OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_opal_cuda_support=0
  export NCCLMPI_NCCL_LIB="$_si_d/libnccl.so.2"
  # the program loads the stand-in driver (preloaded), and ncclmpi finds it there
  export NCCLMPI_CUDA_LIB="$_si_d/libcuda.so.1" NM_TEST_PRELOAD="$_si_d/libcuda.so.1"
}
# stand_in_run PROGNAME BUILDDIR DIR CASE NP PROG [ARGS...]: runs PROG (with ARGS) at NP ranks,
# preloaded (TMPDIR: DIR, 120 s limit), and expects "PROGNAME: ok" in its output (or a line
# matching the grep pattern STAND_IN_EXPECT); says how CASE went; returns 1 when it failed; exits
# 77 when the program skipped.
stand_in_run() {
  _si_name=$1 _si_b=$2 _si_d=$3 _si_case=$4 _si_np=$5 _si_prog=$6
  shift 6
  TMPDIR="$_si_d" timeout 120 "$_si_b/test/run_mpi.sh" "$_si_np" preload "$_si_prog" "$@" >"$_si_d/out" 2>"$_si_d/err"
  _si_rc=$?
  [ $_si_rc = 77 ] && exit 77
  if [ $_si_rc != 0 ] || ! grep -q "${STAND_IN_EXPECT:-$_si_name: ok}" "$_si_d/out"; then
    echo "$_si_name: FAIL: $_si_case, $_si_np ranks (exit $_si_rc$([ $_si_rc = 124 ] && echo ': timed out, a hang'))"
    head -20 "$_si_d/out"
    tail -20 "$_si_d/err"
    return 1
  fi
  echo "$_si_name: $_si_case, $_si_np ranks: ok"
}
# stand_in_ipc: 0 when this machine lets a process open another's file descriptors through
# /proc/PID/fd (what the stand-in's CUDA IPC needs, FAKE_CUDA_IPC=1), else 1.
stand_in_ipc() {
  sh -c 'exec 3</dev/null; sleep 2' &
  _si_pid=$!
  sleep 0.3
  _si_ok=1
  [ -r "/proc/$_si_pid/fd/3" ] && cat "/proc/$_si_pid/fd/3" >/dev/null 2>&1 && _si_ok=0
  kill $_si_pid 2>/dev/null; wait $_si_pid 2>/dev/null
  return $_si_ok
}
# stand_in_need_ipc NAME: exits 77 (skipped) where the stand-in's CUDA IPC cannot work, else
# turns it on (FAKE_CUDA_IPC=1)
stand_in_need_ipc() {
  stand_in_ipc || { echo "$1: skipped (a process cannot open another's descriptors here)"; exit 77; }
  export FAKE_CUDA_IPC=1
}
# stand_in_envelopes PROGNAME BUILDDIR DIR PROG [CHECK]: stand_in_run of PROG at 1 to 3 ranks in
# each point-to-point envelope mode (NCCLMPI_P2P_ENVELOPE off, host, device); after each run that
# passed, CHECK MODE NP (the caller's function) may look at DIR/out. Returns 1 when one failed.
stand_in_envelopes() {
  _se_fail=0
  for _se_env in off host device; do
    for _se_np in 1 2 3; do
      if NCCLMPI_P2P_ENVELOPE=$_se_env stand_in_run "$1" "$2" "$3" "NCCLMPI_P2P_ENVELOPE=$_se_env" $_se_np "$4"; then
        [ -z "${5:-}" ] || "$5" $_se_env $_se_np || _se_fail=1
      else
        _se_fail=1
      fi
    done
  done
  return $_se_fail
}
