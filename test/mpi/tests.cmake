# Host-buffer MPI tests (label mpi): the programs of test/mpi/Makefile.inc under test/run_mpi.sh.
#   preload  test/mpi/<prog> with LD_PRELOAD=libncclmpi.so    np 1 2 3 4   --ncclmpi=require
#   linked   test/mpi/<prog>_linked (-lncclmpi)               np 1 2 3 4   --ncclmpi=require
#   plain    test/mpi/<prog> without ncclmpi                  np 2 3       --ncclmpi=absent
# --ncclmpi=require: the program fails unless every intercepted function it called entered
# ncclmpi's wrapper and was routed to the host; --ncclmpi=absent: unless ncclmpi is absent.
# (In a CTestTestfile add_test takes the plain form: add_test(name command args...).)
set(NM_MPI_PROGRAMS coll_blocking coll_nonblocking p2p completion errors comm more_calls more_rma more_io)
foreach(prog IN LISTS NM_MPI_PROGRAMS)
  foreach(np 1 2 3 4)
    add_test(mpi_${prog}_np${np}_preload "${RUN}" ${np} preload "${B}/test/mpi/${prog}" --ncclmpi=require)
    add_test(mpi_${prog}_np${np}_linked "${RUN}" ${np} linked "${B}/test/mpi/${prog}_linked" --ncclmpi=require)
    set_tests_properties(mpi_${prog}_np${np}_preload mpi_${prog}_np${np}_linked PROPERTIES LABELS "mpi" TIMEOUT 120)
  endforeach()
  foreach(np 2 3)
    add_test(mpi_${prog}_np${np}_plain "${RUN}" ${np} plain "${B}/test/mpi/${prog}" --ncclmpi=absent)
    set_tests_properties(mpi_${prog}_np${np}_plain PROPERTIES LABELS "mpi" TIMEOUT 120)
  endforeach()
endforeach()

# The same programs with their calls sent off ncclmpi's fast path (through nm_enter and the
# call descriptor): --slow-path in common.h.
foreach(prog IN LISTS NM_MPI_PROGRAMS)
  add_test(mpi_${prog}_np3_preload_slowpath "${RUN}" 3 preload "${B}/test/mpi/${prog}" --ncclmpi=require
    "--slow-path=${B}/test/mpi/.libs/libnm_tail.so")
  set_tests_properties(mpi_${prog}_np3_preload_slowpath PROPERTIES LABELS "mpi" TIMEOUT 120)
endforeach()

# The same programs with NCCLMPI_P2P_ENVELOPE=device in processes without CUDA: every receive
# and probe goes through ncclmpi, which must change nothing the programs see (errors raised on
# the application's communicator, by its handler, included)
foreach(prog IN LISTS NM_MPI_PROGRAMS)
  add_test(mpi_${prog}_np3_preload_envelope "${RUN}" 3 preload "${B}/test/mpi/${prog}" --ncclmpi=require)
  set_tests_properties(mpi_${prog}_np3_preload_envelope PROPERTIES LABELS "mpi" TIMEOUT 120
                       ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device")
endforeach()

# No NCCL or CUDA library is ever mapped into a host-only program, with the default settings
# and with the settings that do more at MPI_Init and per call.
foreach(np 1 2 3 4)
  add_test(mpi_hostonly_np${np}_preload "${RUN}" ${np} preload "${B}/test/mpi/hostonly" --ncclmpi=require)
  set_tests_properties(mpi_hostonly_np${np}_preload PROPERTIES LABELS "mpi" TIMEOUT 120)
endforeach()
add_test(mpi_hostonly_np3_linked "${RUN}" 3 linked "${B}/test/mpi/hostonly_linked" --ncclmpi=require)
add_test(mpi_hostonly_np2_preload_eager "${RUN}" 2 preload "${B}/test/mpi/hostonly" --ncclmpi=require)
set_tests_properties(mpi_hostonly_np3_linked mpi_hostonly_np2_preload_eager PROPERTIES LABELS "mpi" TIMEOUT 120)
set_tests_properties(mpi_hostonly_np2_preload_eager PROPERTIES
  ENVIRONMENT "NCCLMPI_EAGER=1;NCCLMPI_AGREE=1;NCCLMPI_STATS=1;NCCLMPI_LOG=INFO")

# MPI_ERRORS_ARE_FATAL still aborts the job, with the error code as its exit status: 2 is
# MPI_ERR_COUNT in Open MPI (rank 0 makes an MPI_Allreduce with count -1).
foreach(mode preload linked plain)
  if(mode STREQUAL "linked")
    set(exe "${B}/test/mpi/errors_linked")
  else()
    set(exe "${B}/test/mpi/errors")
  endif()
  add_test(mpi_errors_fatal_np2_${mode} sh "${S}/test/mpi/expect_status.sh" 2 "${RUN}" 2 ${mode} "${exe}" --fatal)
  set_tests_properties(mpi_errors_fatal_np2_${mode} PROPERTIES LABELS "mpi" TIMEOUT 120)
endforeach()

# every intercepted C function is called by some program above
add_test(mpi_coverage sh "${S}/test/mpi/coverage.sh" "${S}" "${B}")
set_tests_properties(mpi_coverage PROPERTIES LABELS "mpi" TIMEOUT 60)

# two threads per rank receiving envelopes (MPI_THREAD_MULTIPLE), and the same under plain MPI
# a send while another thread of the rank waits in the real MPI (the send queue must not hold it)
add_test(mpi_p2p_blocked_thread_np2_envelope "${RUN}" 2 preload "${B}/test/mpi/p2p_blocked_thread")
add_test(mpi_p2p_blocked_thread_np2_plain "${RUN}" 2 plain "${B}/test/mpi/p2p_blocked_thread")
set_tests_properties(mpi_p2p_blocked_thread_np2_envelope mpi_p2p_blocked_thread_np2_plain PROPERTIES LABELS "mpi" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(mpi_p2p_blocked_thread_np2_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=1024")
add_test(mpi_p2p_threads_np2_envelope "${RUN}" 2 preload "${B}/test/mpi/p2p_threads")
add_test(mpi_p2p_threads_np2_plain "${RUN}" 2 plain "${B}/test/mpi/p2p_threads")
set_tests_properties(mpi_p2p_threads_np2_envelope mpi_p2p_threads_np2_plain PROPERTIES LABELS "mpi" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(mpi_p2p_threads_np2_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=1024")
# a receive in one thread while another thread's probe takes its message out of matching
add_test(mpi_p2p_probe_race_np2_envelope "${RUN}" 2 preload "${B}/test/mpi/p2p_probe_race")
add_test(mpi_p2p_probe_race_np2_plain "${RUN}" 2 plain "${B}/test/mpi/p2p_probe_race")
set_tests_properties(mpi_p2p_probe_race_np2_envelope mpi_p2p_probe_race_np2_plain PROPERTIES LABELS "mpi" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(mpi_p2p_probe_race_np2_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=1024")

# libncclmpi in one rank only: the other waits in MPI_Init, and says so
add_test(mpi_init_partial_np2 sh "${S}/test/mpi/init_partial.sh" "${B}")
set_tests_properties(mpi_init_partial_np2 PROPERTIES LABELS "mpi" TIMEOUT 60)

# startup time with and without LD_PRELOAD (prints medians; fails only if a run fails)
add_test(mpi_startup_overhead sh "${S}/test/mpi/startup_overhead.sh" "${B}" 20)
set_tests_properties(mpi_startup_overhead PROPERTIES LABELS "mpi" TIMEOUT 120 RUN_SERIAL TRUE)

# The MPI-4 calls of the table (test/mpi/mpi4.c) where the MPI has them (HAVE_MPI4: Open MPI 5),
# in the modes of the programs above; elsewhere one test reports them skipped.
if(HAVE_MPI4 STREQUAL "1")
  foreach(np 1 2 3 4)
    add_test(mpi_mpi4_np${np}_preload "${RUN}" ${np} preload "${B}/test/mpi/mpi4" --ncclmpi=require)
    add_test(mpi_mpi4_np${np}_linked "${RUN}" ${np} linked "${B}/test/mpi/mpi4_linked" --ncclmpi=require)
    set_tests_properties(mpi_mpi4_np${np}_preload mpi_mpi4_np${np}_linked PROPERTIES LABELS "mpi" TIMEOUT 120)
  endforeach()
  add_test(mpi_mpi4_np3_plain "${RUN}" 3 plain "${B}/test/mpi/mpi4" --ncclmpi=absent)
  add_test(mpi_mpi4_np3_preload_slowpath "${RUN}" 3 preload "${B}/test/mpi/mpi4" --ncclmpi=require
    "--slow-path=${B}/test/mpi/.libs/libnm_tail.so")
  add_test(mpi_mpi4_np3_preload_envelope "${RUN}" 3 preload "${B}/test/mpi/mpi4" --ncclmpi=require)
  set_tests_properties(mpi_mpi4_np3_plain mpi_mpi4_np3_preload_slowpath mpi_mpi4_np3_preload_envelope PROPERTIES
                       LABELS "mpi" TIMEOUT 120)
  set_tests_properties(mpi_mpi4_np3_preload_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device")
else()
  add_test(mpi_mpi4_skipped sh -c "echo 'the MPI has none of the MPI-4 calls of the table: skipped'; exit 77")
  set_tests_properties(mpi_mpi4_skipped PROPERTIES LABELS "mpi" SKIP_RETURN_CODE 77)
endif()
