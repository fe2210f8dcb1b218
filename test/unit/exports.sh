#!/bin/sh
# exports.sh BUILDDIR: libncclmpi.so exports every entry point generated from mpi_api.def (C,
# the four Fortran manglings, Open MPI's mpi_f08 delegates), the public ncclmpi_* API and the
# MPIX_* functions ncclmpi.h declares, and nothing of its internals.
b=$1
lib="$b/.libs/libncclmpi.so"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
missing=$( (cat "$b/src/gen/api_list.txt"; printf 'ncclmpi_get_stats\nncclmpi_print_stats\nncclmpi_version\nncclmpi_nccl_loaded\n'; \
             sed -n 's/^int \(MPIX_[A-Za-z_]*\)(.*/\1/p' "$(dirname "$0")/../../include/ncclmpi.h") \
           | sort | comm -23 - "$(printf '%s\n' "$syms" > "$b/exports.txt"; echo "$b/exports.txt")")
if [ -n "$missing" ]; then echo "exports: missing:"; echo "$missing"; exit 1; fi
leaked=$(grep -E '^(nm_|_ZN7ncclmpi)' "$b/exports.txt")
if [ -n "$leaked" ]; then echo "exports: internal symbols exported:"; echo "$leaked" | head; exit 1; fi
echo "exports: $(wc -l < "$b/src/gen/api_list.txt") MPI entry points + public API exported, no internals"
