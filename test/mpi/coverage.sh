#!/bin/sh
# coverage.sh SRCDIR BUILDDIR
# Every C function ncclmpi intercepts (the MPI_<Name> C entry points of
# BUILDDIR/src/gen/api_list.txt, which must be the rows of src/interpose/mpi_api.def) is called
# by some program of test/mpi through the harness (OK/CALL/COLL/ERR/ERRH of common.h), so the
# counter check of that program covers it.
S=${1:?usage: coverage.sh SRCDIR BUILDDIR}
B=${2:?usage: coverage.sh SRCDIR BUILDDIR}
def="$S/src/interpose/mpi_api.def"
list="$B/src/gen/api_list.txt"
names=$(sed -n 's/^NM_FN(\([A-Za-z_]*\),.*/\1/p' "$def")
[ -n "$names" ] || { echo "coverage: no NM_FN rows in $def" >&2; exit 1; }
# the MPI-4 rows this MPI lacks are not generated (BUILDDIR/src/gen/api_absent.txt)
[ -s "$B/src/gen/api_absent.txt" ] && names=$(echo "$names" | grep -vxF -f "$B/src/gen/api_absent.txt")
fail=0
if [ -f "$list" ]; then
    exported=$(sed -n 's/^MPI_\([A-Z][a-z][A-Za-z_]*\)$/\1/p' "$list" | sort)
    if [ "$exported" != "$(echo "$names" | sort)" ]; then
        echo "coverage: C entry points of $list differ from the rows of $def:" >&2
        echo "$exported" >"${TMPDIR:-/tmp}/nm_cov_exp.$$"
        echo "$names" | sort | diff "${TMPDIR:-/tmp}/nm_cov_exp.$$" - >&2
        rm -f "${TMPDIR:-/tmp}/nm_cov_exp.$$"
        fail=1
    fi
else
    echo "coverage: $list not found (library not built?)" >&2
    fail=1
fi
n=0
for f in $names; do
    n=$((n + 1))
    # (a large-count form MPI_<Name>_c whose counts fit an int is its int form's call, counted as
    # that one: test/mpi/mpi4.c's OKC(<Name>, ...))
    large=NONE
    case $f in *_c) large=${f%_c} ;; esac
    if ! cat "$S"/test/mpi/*.c "$S"/test/mpi/*.h | grep -Eq \
        "OKC\( *$large *,|(OK|CALL)\( *$f *[,)]|COLL\( *$f *,|COLL\( *[A-Za-z_]+ *, *$f *,|ERR\( *[A-Z_]+ *, *[A-Z_]+ *, *$f *,|ERRH\( *[A-Z_]+ *, *[A-Z_]+ *, *[A-Z_]+ *, *$f *,"; then
        echo "coverage: MPI_$f is intercepted but no test/mpi program calls it" >&2
        fail=1
    fi
done
[ "$fail" = 0 ] && echo "coverage: all $n intercepted C functions are called by test/mpi"
exit $fail
