#!/bin/sh
# Regenerate the build system (configure, Makefile.in, libtool helpers).
set -e
cd "$(dirname "$0")"
autoreconf --force --install --verbose
