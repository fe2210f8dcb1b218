# mpi tests: see test/mpi/Makefile.inc
