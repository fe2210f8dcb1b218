#!/bin/sh
# man_pages.sh BUILD_DIR SOURCE_DIR: `make install-man` installs ncclmpi_info(1), ncclmpi_exec(1)
# (and the names that point to it: ncclmpicc, ncclmpicxx, ncclmpifort, ncclmpi_check) and
# ncclmpi(7); each renders with man without a groff warning; ncclmpi(7) names every setting of
# doc/config.md.
B=${1:?usage: man_pages.sh BUILD_DIR SOURCE_DIR}
S=${2:?usage: man_pages.sh BUILD_DIR SOURCE_DIR}
command -v man >/dev/null || { echo "man_pages: skipped: no man command"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/nm_man.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
make -s -C "$B" install-man DESTDIR="$T" >"$T/log" 2>&1 || { cat "$T/log"; echo "man_pages: make install-man failed"; exit 1; }
bad=0
for page in 1/ncclmpi_info 1/ncclmpi_exec 1/ncclmpicc 1/ncclmpicxx 1/ncclmpifort 1/ncclmpi_check 7/ncclmpi; do
  f=$(find "$T" -path "*/man${page%%/*}/${page#*/}.${page%%/*}" | head -1)
  if [ -z "$f" ]; then echo "man_pages: ${page#*/}(${page%%/*}) not installed"; bad=1; continue; fi
  mandir=${f%/man*/*}
  # through the installed tree, so that the .so pages resolve as they will for users
  MANWIDTH=100 MANPAGER=cat LC_ALL=C man --warnings -M "$mandir" "${page%%/*}" "${page#*/}" >"$T/out" 2>"$T/err"
  rc=$?
  if [ $rc -ne 0 ] || [ -s "$T/err" ] || ! grep -q '^NAME' "$T/out"; then
    echo "man_pages: ${page#*/}(${page%%/*}) does not render cleanly (exit $rc):"; head -5 "$T/err"; bad=1
  else
    echo "man_pages: ${page#*/}(${page%%/*}): $(wc -l <"$T/out") lines"
  fi
  # and the file itself, as man -l renders it (not for the pages that only point to another)
  if ! grep -q '^\.so ' "$f"; then
    MANWIDTH=100 LC_ALL=C man --warnings -l "$f" >/dev/null 2>"$T/err" && [ ! -s "$T/err" ] ||
      { echo "man_pages: man -l $f:"; head -5 "$T/err"; bad=1; }
  fi
  [ "$page" = 7/ncclmpi ] || continue
  for v in $(grep -o '^| `NCCLMPI_[A-Z0-9_]*`' "$S/doc/config.md" | tr -d '|` '); do
    grep -q "$v" "$T/out" || { echo "man_pages: ncclmpi(7) lacks $v"; bad=1; }
  done
done
exit $bad
