# fortran tests: see test/fortran/Makefile.inc. Each program (mpif.h, use mpi, use mpi_f08) runs
# at np 1-4 with libncclmpi preloaded and --expect-ncclmpi (a run without the library, or in
# which ncclmpi did not see every Fortran call, fails), and at np 2 without ncclmpi (plain).
# Without a working mpifort (configure: HAVE_FORTRAN=0) one test reports the suite as skipped.
if(HAVE_FORTRAN STREQUAL "1")
  foreach(prog f_mpif f_usempi f_f08 f_more_mpif f_more_usempi f_more_f08)
    foreach(np 1 2 3 4)
      add_test(fortran_${prog}_np${np}_preload "${RUN}" ${np} preload "${B}/test/fortran/${prog}" --expect-ncclmpi)
      set_tests_properties(fortran_${prog}_np${np}_preload PROPERTIES LABELS "fortran" TIMEOUT 120)
    endforeach()
    add_test(fortran_${prog}_np2_plain "${RUN}" 2 plain "${B}/test/fortran/${prog}")
    set_tests_properties(fortran_${prog}_np2_plain PROPERTIES LABELS "fortran" TIMEOUT 120)
  endforeach()
  # with point-to-point envelopes (NCCLMPI_P2P_ENVELOPE=host): every Fortran receive, probe and
  # test goes through ncclmpi, mpi_f08's MPI_Test/MPI_Iprobe (which Open MPI sends to its PMPI
  # layer directly) included
  foreach(prog f_mpif f_f08)
    add_test(fortran_${prog}_np3_envelope "${RUN}" 3 preload "${B}/test/fortran/${prog}" --expect-ncclmpi)
    set_tests_properties(fortran_${prog}_np3_envelope PROPERTIES LABELS "fortran" TIMEOUT 120
                         ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=1024")
  endforeach()
  # device buffers from Fortran: label gpu, skipped (77) without a GPU
  foreach(prog f_device_f08 f_device_mpif)
    foreach(np 1 2)
      add_test(gpu_fortran_${prog}_np${np} "${S}/test/gpu/gpu_run.sh" "${B}" ${np} "${B}/test/fortran/${prog}")
      set_tests_properties(gpu_fortran_${prog}_np${np} PROPERTIES LABELS "gpu;fortran" TIMEOUT 300 SKIP_RETURN_CODE 77)
    endforeach()
  endforeach()
else()
  add_test(fortran_skipped /bin/sh -c "echo 'fortran tests skipped: configure found no mpifort that builds use mpi_f08 programs'; exit 77")
  set_tests_properties(fortran_skipped PROPERTIES LABELS "fortran" SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
