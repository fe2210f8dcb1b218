# fortran tests: see test/fortran/Makefile.inc
