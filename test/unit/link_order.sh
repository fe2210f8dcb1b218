#!/bin/sh
# link_order.sh BUILD_DIR SOURCE_DIR: relink a plain MPI program in each way the README shows,
# right and wrong, each with the linker's defaults and with -Wl,--as-needed (which drops a library
# none of whose symbols the program needs first). For each the layer must be there (ncclmpi_check
# says ok, NCCLMPI_STATS=1 prints its table at MPI_Finalize) or the user must be told
# (ncclmpi_check says absent or after; where libncclmpi is loaded after the MPI library, the run
# itself warns on stderr). Prints one line per way: what ncclmpi_check and the run said.
B=${1:?usage: link_order.sh BUILD_DIR SOURCE_DIR}
S=${2:?usage: link_order.sh BUILD_DIR SOURCE_DIR}
L="$B/.libs"
T=$(mktemp -d "${TMPDIR:-/tmp}/nm_link.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
unset LD_PRELOAD
command -v pkg-config >/dev/null || { echo "link_order: skipped: no pkg-config"; exit 77; }
# the installed forms, pointed at the build directory: ncclmpi.pc and the wrapper compiler
sed -e "s|^libdir=.*|libdir=$L|" -e "s|^includedir=.*|includedir=$S/include|" "$B/ncclmpi.pc" > "$T/ncclmpi.pc"
sed -e "s|-I[^ ]* -L[^ ]* -Wl,-rpath,[^ ]* |-I$S/include -L$L -Wl,-rpath,$L |" "$B/tools/ncclmpicc" > "$T/ncclmpicc"
chmod +x "$T/ncclmpicc"
MPICC=$("$T/ncclmpicc" --ncclmpi-showme | cut -d' ' -f1)
PC=$(PKG_CONFIG_PATH="$T" pkg-config --libs ncclmpi) || { echo "link_order: pkg-config failed" >&2; exit 1; }
"$MPICC" -c "$S/test/unit/link_order_prog.c" -o "$T/prog.o" || exit 1
check="$S/tools/ncclmpi_check"
bad=0
# try NAME AS_NEEDED_FLAG CHECK RUN LINK_COMMAND...: link (LINK_COMMAND -o EXE; none for preload),
# then expect ncclmpi_check's verdict CHECK and the run's RUN (stats, warn or none)
try() {
  name=$1 asn=$2 want_check=$3 want_run=$4; shift 4
  exe="$T/exe_$name$asn"
  case "$name" in
  preload) "$MPICC" $asn "$T/prog.o" -o "$exe" || { bad=1; return; } ;;
  *) "$@" -o "$exe" || { echo "link_order: $name: link failed" >&2; bad=1; return; } ;;
  esac
  pre=""
  [ "$name" = preload ] && pre="$L/libncclmpi.so"
  got_check=$(LD_PRELOAD="$pre" "$check" "$exe" 2>&1)
  verdict=$(printf '%s' "$got_check" | sed -n 's/.*): \([a-z-]*\):.*/\1/p' | head -1)
  mode=plain
  [ -n "$pre" ] && mode=preload
  out=$(NCCLMPI_STATS=1 timeout 60 "$B/test/run_mpi.sh" 2 $mode "$exe" 2>&1)
  rc=$?
  run=none
  case "$out" in *"bypass it"*) run=warn ;; esac
  case "$out" in *"[ncclmpi] route counts at MPI_Finalize"*) run=stats ;; esac
  echo "link_order: ${name}${asn:+ ($asn)}: ncclmpi_check: $verdict; run: $run (exit $rc)"
  if [ $rc -ne 0 ] || [ "$verdict" != "$want_check" ] || [ "$run" != "$want_run" ]; then
    echo "link_order: ${name}${asn:+ ($asn)}: expected ncclmpi_check $want_check and run $want_run" >&2
    printf '%s\n%s\n' "$got_check" "$out" | head -20 >&2
    bad=1
  fi
}
for asn in "" "-Wl,--as-needed"; do
  # right: the wrapper compiler; pkg-config's flags (mpicc adds -lmpi after them); -lncclmpi
  # before the MPI library; preloading
  try ncclmpicc "$asn" ok stats "$T/ncclmpicc" $asn "$T/prog.o"
  try ncclmpicc_lmpi "$asn" ok stats "$T/ncclmpicc" $asn "$T/prog.o" -lmpi
  try pkgconfig "$asn" ok stats "$MPICC" $asn "$T/prog.o" $PC
  try lncclmpi "$asn" ok stats "$MPICC" $asn "$T/prog.o" -L"$L" -Wl,-rpath,"$L" -lncclmpi
  try preload "$asn" ok stats
  # wrong: pkg-config's flags after -lmpi: kept, but after the MPI library (the run warns)
  try pkgconfig_after_lmpi "$asn" after warn "$MPICC" $asn "$T/prog.o" -lmpi $PC
  # not linked at all
  try none "$asn" absent none "$MPICC" $asn "$T/prog.o"
done
# wrong: a plain -lncclmpi after -lmpi: with --no-as-needed loaded after the MPI library (the run
# warns); with --as-needed (the default of some toolchains, Debian 12's gcc among them) dropped
# altogether, which only ncclmpi_check can tell
try lncclmpi_after_lmpi -Wl,--no-as-needed after warn "$MPICC" -Wl,--no-as-needed "$T/prog.o" -lmpi -L"$L" \
  -Wl,-rpath,"$L" -lncclmpi
try lncclmpi_after_lmpi -Wl,--as-needed absent none "$MPICC" -Wl,--as-needed "$T/prog.o" -lmpi -L"$L" \
  -Wl,-rpath,"$L" -lncclmpi
# CMake, as doc/user-guide.md shows it (pkg-config's imported target ahead of MPI::MPI_C, and
# ncclmpi_check after the link)
if command -v cmake >/dev/null; then
  mkdir -p "$T/cm" && cat > "$T/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.13)
project(app C)
find_package(MPI REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(NCCLMPI REQUIRED IMPORTED_TARGET ncclmpi)
add_executable(app "$S/test/unit/link_order_prog.c")
target_link_libraries(app PRIVATE PkgConfig::NCCLMPI MPI::MPI_C)
add_custom_command(TARGET app POST_BUILD COMMAND "$check" -q \$<TARGET_FILE:app>)
CM
  for asn in "" "-Wl,--as-needed"; do
    rm -rf "$T/cm/b"
    # (the MPI the library was built against: FindMPI would take the first mpicc on PATH)
    if PKG_CONFIG_PATH="$T" cmake -S "$T/cm" -B "$T/cm/b" -DMPI_C_COMPILER="$(command -v "$MPICC")" \
         -DCMAKE_EXE_LINKER_FLAGS="$asn" >"$T/cm/log" 2>&1 &&
       cmake --build "$T/cm/b" >>"$T/cm/log" 2>&1; then
      echo "link_order: cmake${asn:+ ($asn)}: built, ncclmpi_check: ok"
    else
      echo "link_order: cmake${asn:+ ($asn)}: failed" >&2; tail -20 "$T/cm/log" >&2; bad=1
    fi
  done
fi
# wrong: no rpath and no LD_LIBRARY_PATH
if "$MPICC" "$T/prog.o" -L"$L" -lncclmpi -o "$T/norpath"; then
  v=$(env -u LD_LIBRARY_PATH "$check" "$T/norpath" 2>&1)
  echo "link_order: no rpath: $v"
  case "$v" in *"not-found:"*) ;; *) echo "link_order: no rpath: expected not-found" >&2; bad=1 ;; esac
fi
exit $bad
