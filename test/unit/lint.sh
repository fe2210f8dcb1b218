#!/bin/sh
# lint.sh SRCDIR: the core and route layers call only PMPI_* (a bare MPI_ call from inside the
# library would re-enter its own wrappers), and no code outside src/util reads NCCLMPI_*
# variables with getenv.
src=$1
bad=0
hits=$(grep -rnE '(^|[^P_A-Za-z])MPI_[A-Z][a-z0-9_]+ *\(' "$src"/src/core "$src"/src/route "$src"/src/interpose \
       --include=*.cc --include=*.h --include=*.c 2>/dev/null | grep -vE '^\S+:[0-9]+:\s*(//|/\*|\*)')
if [ -n "$hits" ]; then
  echo "lint: bare MPI_ calls in the library (use PMPI_):"; echo "$hits"; bad=1
fi
hits=$(grep -rn 'getenv *(' "$src"/src --include=*.c --include=*.cc --include=*.h | grep -v '^'"$src"'/src/util/config.c:')
if [ -n "$hits" ]; then
  echo "lint: getenv outside src/util/config.c:"; echo "$hits"; bad=1
fi
[ $bad = 0 ] && echo "lint: ok"
exit $bad
