# Host-buffer suites with the CUDA toolkit's stub driver preloaded (label mpi): ncclmpi then
# believes a driver is present, so every call runs its full slow path (classification, routing,
# flush points, communicator states) on machines without a GPU; with NCCLMPI_AGREE=1 every
# collective also votes. And a few programs under valgrind memcheck (test/mpi/valgrind.sh).
if(EXISTS "${STUB_DRIVER}")
  # (more_*: the functions added for full coverage; their REJECT wrappers ask the driver about
  # each buffer and pass host memory on)
  foreach(prog coll_blocking coll_nonblocking p2p completion errors comm more_calls more_rma more_io)
    foreach(agree 0 1)
      add_test(mpi_${prog}_np3_stubdriver_agree${agree} "${RUN}" 3 preload "${B}/test/mpi/${prog}" --ncclmpi=require)
      set_tests_properties(mpi_${prog}_np3_stubdriver_agree${agree} PROPERTIES LABELS "mpi" TIMEOUT 180
                           ENVIRONMENT "NM_TEST_PRELOAD=${STUB_DRIVER};NCCLMPI_AGREE=${agree}")
    endforeach()
  endforeach()
  # hazard scenarios at np3: with the stub driver (stubdriver), and with large host messages as
  # point-to-point envelopes (envelope: the deadlock-prone ones)
  set(nm_hz_stubdriver threads coalesce_triggers explicit_group field_range group_mix first_nb_crossing empty_gatherv_first envelope_order)
  set(nm_hz_envelope progress first_nb_crossing comm_free_outstanding threads fuzz envelope_order coalesce_triggers)
  set(nm_hz_env_stubdriver "NM_TEST_PRELOAD=${STUB_DRIVER}")
  set(nm_hz_env_envelope "NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=512")
  foreach(variant stubdriver envelope)
    foreach(sc IN LISTS nm_hz_${variant})
      add_test(mpi_hazard_${sc}_np3_${variant} "${RUN}" 3 preload "${B}/test/gpu/gpu_hazard" --host ${sc})
      set_tests_properties(mpi_hazard_${sc}_np3_${variant} PROPERTIES LABELS "mpi" TIMEOUT 180
                           ENVIRONMENT "${nm_hz_env_${variant}}")
    endforeach()
  endforeach()
  # (hostonly is left out: it asserts that no CUDA driver is loaded, and valgrind.sh preloads one)
  foreach(prog coll_blocking coll_nonblocking completion p2p comm errors more_calls more_rma more_io init_finalize)
    add_test(mpi_${prog}_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/mpi/${prog}")
    set_tests_properties(mpi_${prog}_np2_valgrind PROPERTIES LABELS "mpi" TIMEOUT 900 SKIP_RETURN_CODE 77
                         ENVIRONMENT "NM_STUB_DRIVER=${STUB_DRIVER}")
  endforeach()
  foreach(sc layout_gather layout_bcast layout_reduce empty_gatherv_first empty_alltoallv_first empty_scatterv bottom
             signature_pipelined threads first_nb_crossing comm_free_outstanding dup_churn progress coalesce_triggers
             explicit_group fuzz agree_mixed uint8_sum)
    add_test(mpi_hazard_${sc}_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/gpu/gpu_hazard" --host ${sc})
    set_tests_properties(mpi_hazard_${sc}_np2_valgrind PROPERTIES LABELS "mpi" TIMEOUT 900 SKIP_RETURN_CODE 77
                         ENVIRONMENT "NM_STUB_DRIVER=${STUB_DRIVER}")
  endforeach()
  # random point-to-point matching (Test and Wait forms, probes, cancel) on host memory
  add_test(mpi_p2p_fuzz_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/gpu/gpu_p2p" --host --max 65536 --rounds 4)
  set_tests_properties(mpi_p2p_fuzz_np2_valgrind PROPERTIES LABELS "mpi" TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NM_STUB_DRIVER=${STUB_DRIVER}")
  # point-to-point envelopes in the host test mode (NCCLMPI_P2P_ENVELOPE=host): messages of 4 KiB and
  # more travel as envelopes; the point-to-point suites, the random matching fuzzer (probes,
  # wildcards, cancels, truncation) and the envelope corner cases must behave as plain MPI
  foreach(np 2 3)
    add_test(mpi_p2p_np${np}_envelope "${RUN}" ${np} preload "${B}/test/mpi/p2p" --ncclmpi=require)
    add_test(mpi_p2p_fuzz_np${np}_envelope "${RUN}" ${np} preload "${B}/test/gpu/gpu_p2p" --host --max 65536 --rounds 20 --seed ${np})
    add_test(mpi_p2p_envelope_np${np} "${RUN}" ${np} preload "${B}/test/mpi/p2p_envelope")
    set_tests_properties(mpi_p2p_np${np}_envelope mpi_p2p_fuzz_np${np}_envelope mpi_p2p_envelope_np${np} PROPERTIES
                         LABELS "mpi" TIMEOUT 180
                         ENVIRONMENT "NM_TEST_PRELOAD=${STUB_DRIVER};NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=4096")
  endforeach()
  add_test(mpi_p2p_envelope_np2_plain "${RUN}" 2 plain "${B}/test/mpi/p2p_envelope")
  set_tests_properties(mpi_p2p_envelope_np2_plain PROPERTIES LABELS "mpi" TIMEOUT 60)
  foreach(np 2 3)  # persistent receives are ncclmpi's there (restarts, cancel, free while active)
    add_test(mpi_persist_np${np}_envelope "${RUN}" ${np} preload "${B}/test/gpu/gpu_persist" --host --iters 200)
    set_tests_properties(mpi_persist_np${np}_envelope PROPERTIES LABELS "mpi" TIMEOUT 120
                         ENVIRONMENT "NM_TEST_PRELOAD=${STUB_DRIVER};NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=4096")
  endforeach()
  add_test(mpi_p2p_envelope_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/gpu/gpu_p2p" --host --max 65536 --rounds 4)
  add_test(mpi_p2p_envelope_cases_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/mpi/p2p_envelope")
  set_tests_properties(mpi_p2p_envelope_np2_valgrind mpi_p2p_envelope_cases_np2_valgrind PROPERTIES LABELS "mpi" TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NM_STUB_DRIVER=${STUB_DRIVER};NCCLMPI_P2P_ENVELOPE=host;NCCLMPI_P2P_ENVELOPE_MIN=512")
  # neighbourhood collectives on three topologies, persistent requests (Start, Request_free,
  # Request_get_status through the library's wrappers), host memory
  add_test(mpi_neighbor_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/gpu/gpu_neighbor" --host)
  add_test(mpi_persist_np2_valgrind sh "${S}/test/mpi/valgrind.sh" "${B}" "${S}" "${B}/test/gpu/gpu_persist" --host --iters 50)
  set_tests_properties(mpi_neighbor_np2_valgrind mpi_persist_np2_valgrind PROPERTIES LABELS "mpi" TIMEOUT 900
                       SKIP_RETURN_CODE 77 ENVIRONMENT "NM_STUB_DRIVER=${STUB_DRIVER}")
endif()
