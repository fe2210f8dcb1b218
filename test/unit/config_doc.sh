#!/bin/sh
# config_doc.sh BUILDDIR SRCDIR: doc/config.md is what `ncclmpi_info -m` prints from
# src/util/config.def (the build-specific NCCL path excepted), and `-s` works.
b=$1; s=$2
"$b/tools/ncclmpi_info" -s > /dev/null || exit 1
"$b/tools/ncclmpi_info" -m | grep -v NCCLMPI_NCCL_LIB > "$b/config_table.md"
grep -v NCCLMPI_NCCL_LIB "$s/doc/config.md" | diff -u - "$b/config_table.md" || {
  echo "config_doc: doc/config.md is stale: regenerate it with tools/ncclmpi_info -m > doc/config.md"; exit 1; }
echo "config_doc: doc/config.md matches config.def ($(grep -c '^| `NCCLMPI' "$b/config_table.md") variables)"
