# gpu tests: see test/gpu/Makefile.inc
