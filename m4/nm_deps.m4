# Dependency checks for ncclmpi. Each missing dependency stops configure with a message that
# names what is missing and the option that fixes it.

# NM_DEFINE_STRING(NAME, VALUE, DESCRIPTION): AC_DEFINE_UNQUOTED of a C string literal, with
# backslashes and double quotes in VALUE escaped.
AC_DEFUN([NM_DEFINE_STRING], [
  nm_str=$(AS_ECHO(["$2"]) | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')
  AC_DEFINE_UNQUOTED([$1], ["$nm_str"], [$3])
])

# NM_WITH_MPI: choose the MPI compiler wrappers before AC_PROG_CC so the whole build uses them.
AC_DEFUN([NM_WITH_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi=DIR], [MPI installation prefix (default: mpicc/mpicxx on PATH)])],
    [], [with_mpi=yes])
  AS_IF([test "x$with_mpi" = xno], [AC_MSG_ERROR([ncclmpi wraps MPI; --without-mpi is not possible])])
  nm_mpi_path="$PATH"
  AS_IF([test "x$with_mpi" != xyes], [nm_mpi_path="$with_mpi/bin"])
  AS_IF([test -z "$CC"], [
    AC_PATH_PROGS([NM_MPICC], [mpicc], [], [$nm_mpi_path])
    CC="$NM_MPICC"
  ])
  AS_IF([test -z "$CXX"], [
    AC_PATH_PROGS([NM_MPICXX], [mpicxx mpic++ mpiCC], [], [$nm_mpi_path])
    CXX="$NM_MPICXX"
  ])
  AS_IF([test -z "$CC" || test -z "$CXX"],
    [AC_MSG_ERROR([MPI compiler wrappers (mpicc, mpicxx) not found in $nm_mpi_path. Install an MPI
    (Debian: apt-get install libopenmpi-dev openmpi-bin) or point to one with --with-mpi=DIR.])])
  AC_PATH_PROGS([MPIEXEC], [mpiexec mpirun], [], [$nm_mpi_path])
  AS_IF([test -z "$MPIEXEC"], [AC_MSG_ERROR([mpiexec/mpirun not found in $nm_mpi_path; use --with-mpi=DIR])])
])

AC_DEFUN([NM_CHECK_MPI], [
  AC_MSG_CHECKING([that $CC compiles and links an MPI program])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[int f; PMPI_Initialized(&f); return MPI_VERSION < 3;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build an MPI-3 program with PMPI. Install an MPI (Debian: libopenmpi-dev)
     or point to one with --with-mpi=DIR.])])
  nm_mpi_ver=""
  AC_COMPUTE_INT([nm_ompi_major], [OMPI_MAJOR_VERSION], [[#include <mpi.h>]], [nm_ompi_major=""])
  AS_IF([test -n "$nm_ompi_major"], [
     AC_COMPUTE_INT([nm_ompi_minor], [OMPI_MINOR_VERSION], [[#include <mpi.h>]])
     AC_COMPUTE_INT([nm_ompi_rel], [OMPI_RELEASE_VERSION], [[#include <mpi.h>]])
     nm_mpi_ver="Open MPI $nm_ompi_major.$nm_ompi_minor.$nm_ompi_rel" NM_MPI_FLAVOR=ompi],
    [AC_COMPUTE_INT([nm_mpich_num], [MPICH_NUMVERSION], [[#include <mpi.h>]], [nm_mpich_num=""])
     AS_IF([test -n "$nm_mpich_num"],
       [nm_mpi_ver="MPICH `expr $nm_mpich_num / 10000000`.`expr $nm_mpich_num / 100000 % 100`.`expr $nm_mpich_num / 1000 % 100`"
        NM_MPI_FLAVOR=mpich],
       [nm_mpi_ver="an MPI neither Open MPI nor MPICH (untested)" NM_MPI_FLAVOR=other])])
  # (test/run_mpi.sh: how to launch, pass the environment and preload under this MPI's mpiexec)
  AC_SUBST([NM_MPI_FLAVOR])
  AC_COMPUTE_INT([nm_fint_ok], [sizeof(MPI_Fint) == sizeof(int)], [[#include <mpi.h>]], [nm_fint_ok=0])
  AS_IF([test "$nm_fint_ok" != 1],
    [AC_MSG_ERROR([MPI_Fint is not a C int in this MPI; the Fortran entry points assume it is])])
  NM_MPI_DESC="$nm_mpi_ver"
  AC_SUBST([MPIEXEC])
  AC_DEFINE_UNQUOTED([NM_BUILD_MPI], ["$nm_mpi_ver"], [MPI implementation of mpi.h at build time])
  NM_DEFINE_STRING([NM_BUILD_CC], [$CC], [C compiler (MPI wrapper)])
  NM_DEFINE_STRING([NM_BUILD_CXX], [$CXX], [C++ compiler (MPI wrapper)])
  NM_DEFINE_STRING([NM_BUILD_MPIEXEC], [$MPIEXEC], [mpiexec found at build time])
])

AC_DEFUN([NM_CHECK_MPIFORT], [
  AC_ARG_WITH([fortran],
    [AS_HELP_STRING([--without-fortran], [do not build the Fortran tests])], [], [with_fortran=check])
  NM_MPIFORT=""
  AS_IF([test "x$with_fortran" != xno], [AC_PATH_PROGS([NM_MPIFORT], [mpifort mpif90], [], [$nm_mpi_path])])
  nm_have_fort=no
  AS_IF([test -n "$NM_MPIFORT"], [
    AC_MSG_CHECKING([that $NM_MPIFORT builds mpif.h, use mpi and use mpi_f08 programs])
    cat > conftest_f.f90 <<'FEOF'
program t
use mpi_f08
call MPI_Init()
call MPI_Finalize()
end program
FEOF
    AS_IF([$NM_MPIFORT conftest_f.f90 -o conftest_f >&AS_MESSAGE_LOG_FD 2>&1],
          [nm_have_fort=yes], [nm_have_fort=no])
    rm -f conftest_f conftest_f.f90 *.mod
    AC_MSG_RESULT([$nm_have_fort])])
  AS_IF([test "x$with_fortran" = xyes && test "x$nm_have_fort" = xno],
    [AC_MSG_ERROR([--with-fortran given but no working mpifort/mpif90 with mpi_f08 (Debian: apt-get install gfortran)])])
  AM_CONDITIONAL([NM_HAVE_FORTRAN], [test "x$nm_have_fort" = xyes])
  AS_IF([test "x$nm_have_fort" = xyes], [NM_HAVE_FORTRAN_VALUE=1], [NM_HAVE_FORTRAN_VALUE=0])
  AC_SUBST([NM_HAVE_FORTRAN_VALUE])
  AS_IF([test "x$nm_have_fort" = xyes], [NM_FORT_DESC="$NM_MPIFORT"], [NM_FORT_DESC="no (fortran tests are skipped)"])
  AC_SUBST([NM_MPIFORT])
])

AC_DEFUN([NM_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=DIR], [CUDA toolkit (default /usr/local/cuda); only cuda.h is needed at build time])],
    [], [with_cuda=/usr/local/cuda])
  AS_IF([test "x$with_cuda" = xno], [AC_MSG_ERROR([ncclmpi needs the CUDA headers; --without-cuda is not possible])])
  NM_CUDA_DIR="$with_cuda"
  nm_save_CPPFLAGS="$CPPFLAGS"
  CPPFLAGS="$CPPFLAGS -I$NM_CUDA_DIR/include"
  AC_CHECK_HEADER([cuda.h], [],
    [AC_MSG_ERROR([cuda.h not found in $NM_CUDA_DIR/include. Install the CUDA toolkit headers or use --with-cuda=DIR])])
  AC_COMPUTE_INT([NM_CUDA_VERSION], [CUDA_VERSION], [[#include <cuda.h>]], [NM_CUDA_VERSION=unknown])
  AS_IF([test "$NM_CUDA_VERSION" -lt 11000 2>/dev/null], [AC_MSG_ERROR([CUDA >= 11.0 headers needed, found $NM_CUDA_VERSION])])
  NM_CUDA_VERSION_STR="$NM_CUDA_VERSION"
  AS_IF([test "$NM_CUDA_VERSION" -gt 0 2>/dev/null],
    [NM_CUDA_VERSION_STR="`expr $NM_CUDA_VERSION / 1000`.`expr $NM_CUDA_VERSION % 1000 / 10`"])
  AC_DEFINE_UNQUOTED([NM_BUILD_CUDA_VERSION], ["$NM_CUDA_VERSION_STR"], [cuda.h version (CUDA_VERSION) at build time])
  NM_DEFINE_STRING([NM_BUILD_CUDA_DIR], [$NM_CUDA_DIR], [CUDA toolkit directory given at build time])
  CPPFLAGS="$nm_save_CPPFLAGS"
  NM_CUDA_CPPFLAGS="-I$NM_CUDA_DIR/include"
  AC_PATH_PROG([NVCC], [nvcc], [], [$NM_CUDA_DIR/bin:$PATH])
  AM_CONDITIONAL([NM_HAVE_NVCC], [test -n "$NVCC"])
  AC_SUBST([NM_CUDA_CPPFLAGS])
  AC_SUBST([NM_CUDA_DIR])
])

AC_DEFUN([NM_CHECK_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL installation (default: search the CUDA dir and system paths)])],
    [], [with_nccl=check])
  AS_IF([test "x$with_nccl" = xno], [AC_MSG_ERROR([ncclmpi needs NCCL; --without-nccl is not possible])])
  nm_nccl_dirs="$with_nccl"
  AS_IF([test "x$with_nccl" = xcheck], [nm_nccl_dirs="$NM_CUDA_DIR /usr /usr/local"])
  NM_NCCL_INCDIR=""
  NM_NCCL_LIB=""
  for d in $nm_nccl_dirs; do
    AS_IF([test -z "$NM_NCCL_INCDIR" && test -f "$d/include/nccl.h"], [NM_NCCL_INCDIR="$d/include"])
    for l in "$d/lib64" "$d/lib" "$d/lib/x86_64-linux-gnu" "$d/lib/aarch64-linux-gnu"; do
      AS_IF([test -z "$NM_NCCL_LIB" && test -e "$l/libnccl.so.2"], [NM_NCCL_LIB="$l/libnccl.so.2"])
    done
  done
  AS_IF([test -z "$NM_NCCL_INCDIR"],
    [AC_MSG_ERROR([nccl.h not found in: $nm_nccl_dirs. Install NCCL (libnccl-dev) or use --with-nccl=DIR])])
  AS_IF([test -z "$NM_NCCL_LIB"],
    [AC_MSG_WARN([libnccl.so.2 not found in $nm_nccl_dirs; at run time the default search path is used])
     NM_NCCL_LIB="libnccl.so.2"])
  nm_save_CPPFLAGS="$CPPFLAGS"
  CPPFLAGS="$CPPFLAGS -I$NM_NCCL_INCDIR $NM_CUDA_CPPFLAGS"
  AC_COMPUTE_INT([nm_nccl_code], [NCCL_VERSION_CODE], [[#include <nccl.h>]], [nm_nccl_code=0])
  AC_COMPUTE_INT([nm_nccl_major], [NCCL_MAJOR], [[#include <nccl.h>]], [nm_nccl_major=0])
  AC_COMPUTE_INT([nm_nccl_minor], [NCCL_MINOR], [[#include <nccl.h>]], [nm_nccl_minor=0])
  AC_COMPUTE_INT([nm_nccl_patch], [NCCL_PATCH], [[#include <nccl.h>]], [nm_nccl_patch=0])
  CPPFLAGS="$nm_save_CPPFLAGS"
  AS_IF([test "$nm_nccl_code" -lt 21800], [AC_MSG_ERROR([NCCL >= 2.18 needed (ncclCommSplit); found code $nm_nccl_code in $NM_NCCL_INCDIR])])
  NM_NCCL_VERSION="$nm_nccl_major.$nm_nccl_minor.$nm_nccl_patch"
  NM_NCCL_CPPFLAGS="-I$NM_NCCL_INCDIR"
  NM_NCCL_LIBDIR=`dirname "$NM_NCCL_LIB"`
  AC_SUBST([NM_NCCL_LIBDIR])
  AC_DEFINE_UNQUOTED([NM_NCCL_DEFAULT_LIB], ["$NM_NCCL_LIB"], [libnccl path dlopen'ed by default])
  AC_DEFINE_UNQUOTED([NM_NCCL_BUILD_VERSION], ["$NM_NCCL_VERSION"], [NCCL headers version at build time])
  AC_DEFINE_UNQUOTED([NM_NCCL_BUILD_CODE], [$nm_nccl_code], [NCCL_VERSION_CODE of the headers at build time])
  NM_DEFINE_STRING([NM_BUILD_NCCL_INCDIR], [$NM_NCCL_INCDIR], [directory of nccl.h at build time])
  AC_SUBST([NM_NCCL_CPPFLAGS])
])

AC_DEFUN([NM_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc],
    [AS_HELP_STRING([--with-hwloc=DIR], [hwloc installation (default: system)])], [], [with_hwloc=check])
  AS_IF([test "x$with_hwloc" = xno], [AC_MSG_ERROR([ncclmpi needs hwloc for NUMA placement; --without-hwloc is not possible])])
  NM_HWLOC_CPPFLAGS=""
  NM_HWLOC_LDFLAGS=""
  AS_IF([test "x$with_hwloc" != xcheck && test "x$with_hwloc" != xyes],
    [NM_HWLOC_CPPFLAGS="-I$with_hwloc/include"; NM_HWLOC_LDFLAGS="-L$with_hwloc/lib -Wl,-rpath,$with_hwloc/lib"])
  nm_save_CPPFLAGS="$CPPFLAGS"; nm_save_LDFLAGS="$LDFLAGS"; nm_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $NM_HWLOC_CPPFLAGS"; LDFLAGS="$LDFLAGS $NM_HWLOC_LDFLAGS"
  AC_CHECK_HEADER([hwloc.h], [],
    [AC_MSG_ERROR([hwloc.h not found. Install hwloc (Debian: apt-get install libhwloc-dev) or use --with-hwloc=DIR])])
  AC_CHECK_LIB([hwloc], [hwloc_topology_init], [],
    [AC_MSG_ERROR([libhwloc not found. Install hwloc (Debian: apt-get install libhwloc-dev) or use --with-hwloc=DIR])])
  AC_COMPUTE_INT([nm_hwloc_api], [HWLOC_API_VERSION], [[#include <hwloc.h>]], [nm_hwloc_api=0])
  nm_hwloc_api_hex="0x`printf %x $nm_hwloc_api`"
  # the release (2.9.0): HWLOC_VERSION_* (hwloc >= 2.1), else pkg-config, else the API version only
  nm_hwloc_ver=""
  AC_COMPUTE_INT([nm_hwloc_major], [HWLOC_VERSION_MAJOR], [[#include <hwloc.h>]], [nm_hwloc_major=""])
  AS_IF([test -n "$nm_hwloc_major"], [
    AC_COMPUTE_INT([nm_hwloc_minor], [HWLOC_VERSION_MINOR], [[#include <hwloc.h>]], [nm_hwloc_minor=0])
    AC_COMPUTE_INT([nm_hwloc_rel], [HWLOC_VERSION_RELEASE], [[#include <hwloc.h>]], [nm_hwloc_rel=0])
    nm_hwloc_ver="$nm_hwloc_major.$nm_hwloc_minor.$nm_hwloc_rel"])
  AS_IF([test -z "$nm_hwloc_ver" && test "x$with_hwloc" = xcheck],
    [nm_hwloc_ver=`pkg-config --modversion hwloc 2>/dev/null`])
  AS_IF([test "x$with_hwloc" = xcheck || test "x$with_hwloc" = xyes], [nm_hwloc_where="system"], [nm_hwloc_where="$with_hwloc"])
  AS_IF([test -n "$nm_hwloc_ver"],
    [NM_HWLOC_DESC="$nm_hwloc_ver (API $nm_hwloc_api_hex), $nm_hwloc_where"],
    [NM_HWLOC_DESC="API $nm_hwloc_api_hex, $nm_hwloc_where"])
  AS_IF([test -z "$nm_hwloc_ver"], [nm_hwloc_ver="unknown"])
  AC_DEFINE_UNQUOTED([NM_BUILD_HWLOC_VERSION], ["$nm_hwloc_ver"], [hwloc release of the headers at build time])
  AC_DEFINE_UNQUOTED([NM_BUILD_HWLOC_API], [$nm_hwloc_api], [HWLOC_API_VERSION of the headers at build time])
  NM_DEFINE_STRING([NM_BUILD_HWLOC_DIR], [$nm_hwloc_where], [hwloc installation used at build time])
  CPPFLAGS="$nm_save_CPPFLAGS"; LDFLAGS="$nm_save_LDFLAGS"; LIBS="$nm_save_LIBS"
  NM_HWLOC_LIBS="-lhwloc"
  AC_SUBST([NM_HWLOC_CPPFLAGS])
  AC_SUBST([NM_HWLOC_LDFLAGS])
  AC_SUBST([NM_HWLOC_LIBS])
])

# NM_CHECK_MPI4_FNS: which of the table's MPI4 rows (src/interpose/mpi_api.def, FLAGS "...|MPI4")
# the MPI declares and links: NM_MPI4_FNS, the list tools/gen_wrappers.py generates (--have).
# Three groups: the MPI-4 calls (MPI_Isendrecv, ...), their large-count forms (rows <Name>_c:
# MPICH 4.x has them; Open MPI 5.0 none) and the MPI-4.1 calls (FLAGS "...|MPI41":
# MPI_Request_get_status_any/all/some; MPICH 4.2 has them, Open MPI 5.0 none). Per group one link test of them all first (an MPI-4
# library has them all), then one per function (the large-count group's only where MPI_Send_c
# links: an MPI without it has none of them).
AC_DEFUN([NM_CHECK_MPI4_FNS], [
  nm_mpi4_rows=`sed -n 's/^NM_FN(\([[A-Za-z_]]*\),[[^,]]*,[[^,]]*,[[^,]]*|MPI4[[,) ]].*/\1/p' "$srcdir/src/interpose/mpi_api.def"`
  nm_mpi4_all=`echo "$nm_mpi4_rows" | grep -v '_c$'`
  nm_large_all=`echo "$nm_mpi4_rows" | grep '_c$'`
  nm_mpi41_all=`sed -n 's/^NM_FN(\([[A-Za-z_]]*\),[[^,]]*,[[^,]]*,[[^,]]*|MPI41[[,) ]].*/\1/p' "$srcdir/src/interpose/mpi_api.def"`
  for nm_group in mpi4 large mpi41; do
    AS_CASE([$nm_group],
      [mpi4], [nm_list=$nm_mpi4_all nm_sentinel=""
       AC_MSG_CHECKING([for the MPI-4 functions of the table (MPI_Isendrecv, MPI_Allreduce_init, ...)])],
      [large], [nm_list=$nm_large_all nm_sentinel=Send_c
       AC_MSG_CHECKING([for the MPI-4 large-count forms of the table (MPI_Send_c, MPI_Allreduce_c, ...)])],
      [nm_list=$nm_mpi41_all nm_sentinel=""
       AC_MSG_CHECKING([for the MPI-4.1 functions of the table (MPI_Request_get_status_any, ...)])])
    nm_refs=""
    for f in $nm_list; do nm_refs="$nm_refs (void *)&MPI_$f, (void *)&PMPI_$f,"; done
    nm_have=""
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[void *volatile p[] = {$nm_refs 0}; return p[0] == 0;]])],
      [nm_have=`echo $nm_list`],
      [nm_one=yes
       AS_IF([test -n "$nm_sentinel"],
         [AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[void *volatile p[] = {(void *)&MPI_$nm_sentinel, (void *)&PMPI_$nm_sentinel}; return p[0] == 0;]])],
           [], [nm_one=no])])
       AS_IF([test $nm_one = yes],
         [for f in $nm_list; do
            AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[void *volatile p[] = {(void *)&MPI_$f, (void *)&PMPI_$f}; return p[0] == 0;]])],
              [nm_have="$nm_have $f"])
          done])])
    nm_have=`echo $nm_have`
    nm_n=`echo $nm_have | wc -w`
    nm_of=`echo $nm_list | wc -w`
    AC_MSG_RESULT([$nm_n of $nm_of])
    eval nm_${nm_group}_have=\$nm_have
  done
  nm_mpi4_n=`echo $nm_mpi4_have | wc -w`
  nm_mpi4_of=`echo $nm_mpi4_all | wc -w`
  nm_large_n=`echo $nm_large_have | wc -w`
  nm_large_of=`echo $nm_large_all | wc -w`
  nm_mpi41_n=`echo $nm_mpi41_have | wc -w`
  nm_mpi41_of=`echo $nm_mpi41_all | wc -w`
  NM_MPI4_FNS=`echo $nm_mpi4_have $nm_large_have $nm_mpi41_have`
  NM_MPI4_DESC="$nm_mpi4_n of $nm_mpi4_of, large-count (_c) forms $nm_large_n of $nm_large_of, MPI-4.1 $nm_mpi41_n of $nm_mpi41_of"
  AC_SUBST([NM_MPI4_FNS])
  # the tests of them (test/mpi/mpi4.c, test/unit/mpi4_device.sh): where the MPI has them all;
  # their large-count parts where it has those too
  AS_IF([test "$nm_mpi4_n" = "$nm_mpi4_of"], [NM_HAVE_MPI4_VALUE=1], [NM_HAVE_MPI4_VALUE=0])
  AM_CONDITIONAL([NM_HAVE_MPI4], [test "$NM_HAVE_MPI4_VALUE" = 1])
  AC_SUBST([NM_HAVE_MPI4_VALUE])
  AS_IF([test "$nm_large_n" = "$nm_large_of"], [nm_large_value=1], [nm_large_value=0])
  AC_DEFINE_UNQUOTED([NM_BUILD_HAVE_MPI_LARGE], [$nm_large_value],
    [1 where the MPI has every large-count (_c) form of the table (the tests of them are built)])
  AS_IF([test "$nm_mpi41_n" = "$nm_mpi41_of"], [nm_mpi41_value=1], [nm_mpi41_value=0])
  AC_DEFINE_UNQUOTED([NM_BUILD_HAVE_MPI41], [$nm_mpi41_value],
    [1 where the MPI has every MPI-4.1 function of the table (the tests of them are built)])
  NM_DEFINE_STRING([NM_BUILD_MPI4_FNS], [$NM_MPI4_FNS], [the MPI-4 functions of the table that the MPI provides (generated)])
  # MPI_Pready_list's partition list: const int[] in the standard and MPICH, int[] in Open MPI 5
  nm_pready_const=""
  AS_CASE([" $nm_mpi4_have "], [*" Pready_list "*],
    [AC_MSG_CHECKING([whether MPI_Pready_list takes a const partition list])
     AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
int PMPI_Pready_list(int length, const int array_of_partitions[], MPI_Request request);]], [[]])],
       [nm_pready_const=const; AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no])])])
  AC_DEFINE_UNQUOTED([NM_PREADY_LIST_CONST], [$nm_pready_const],
    [const where the MPI declares MPI_Pready_list's partition list const (the table's row)])
])

# NM_CHECK_MPI_REVOKE: whether the MPI has ULFM's revocation of a communicator: MPIX_Comm_revoke
# (Open MPI 5, declared in <mpi-ext.h>; MPICH, in <mpi.h>) or MPI_Comm_revoke. NM_REVOKE_FN: the
# one it has; NM_HAVE_REVOKE: the test of calls on a revoked communicator
# (test/unit/revoke.sh) is built (Open MPI 4.1 has neither).
AC_DEFUN([NM_CHECK_MPI_REVOKE], [
  AC_MSG_CHECKING([for ULFM's revocation of a communicator (MPIX_Comm_revoke, MPI_Comm_revoke)])
  NM_REVOKE_FN=""
  for nm_fn in MPIX_Comm_revoke MPI_Comm_revoke; do
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif]], [[int (*volatile f)(MPI_Comm) = $nm_fn; return f == 0;]])],
      [NM_REVOKE_FN=$nm_fn; break])
  done
  AS_IF([test -n "$NM_REVOKE_FN"], [AC_MSG_RESULT([$NM_REVOKE_FN])], [AC_MSG_RESULT([no])])
  AM_CONDITIONAL([NM_HAVE_REVOKE], [test -n "$NM_REVOKE_FN"])
  AC_SUBST([NM_REVOKE_FN])
  # whether a communicator is revoked (Open MPI 5's PMPIX_Comm_is_revoked): a blocking receive
  # that ncclmpi posts as MPI_Irecv + MPI_Wait asks first (core/tl/p2p/env_probe.cc)
  AC_MSG_CHECKING([for PMPIX_Comm_is_revoked])
  nm_is_revoked=0
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif]], [[int flag = 0; return PMPIX_Comm_is_revoked(MPI_COMM_WORLD, &flag);]])], [nm_is_revoked=1])
  AS_IF([test $nm_is_revoked = 1], [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no])])
  AC_DEFINE_UNQUOTED([NM_BUILD_HAVE_COMM_IS_REVOKED], [$nm_is_revoked],
    [1 where the MPI has PMPIX_Comm_is_revoked (ULFM, Open MPI 5)])
])
