#!/bin/bash
# tools/quickstart.sh demo|test — from a fresh clone: install what is missing (Debian, as root),
# build out of tree in ./_build, then run the demo (mpirun -np 2, library preloaded) or the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-demo}
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
case "$what" in
demo)
  make -j"$(nproc)" tools/ncclmpi_demo >>make.log 2>&1
  ./test/run_mpi.sh 2 preload ./tools/ncclmpi_demo ;;
test)
  make -j"$(nproc)" check ;;
*) echo "usage: tools/quickstart.sh demo|test" >&2; exit 2 ;;
esac
