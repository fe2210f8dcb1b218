# GPU tests (label gpu). Each runs through gpu_run.sh, which exits 77 (skipped) without a GPU.
# On one GPU, 2-4 ranks share it: NCCL refuses that, so those runs exercise the staged path.
set(GRUN "${S}/test/gpu/gpu_run.sh" "${B}")
foreach(np 1 2 3 4)
  add_test(gpu_coll_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_coll")
  add_test(gpu_misc_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_misc")
  add_test(gpu_stream_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_stream")
  set_tests_properties(gpu_coll_np${np} gpu_misc_np${np} gpu_stream_np${np}
                       PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()
# the staged path on every rank, whatever the GPUs; small chunks so large counts pipeline
add_test(gpu_coll_np2_staged ${GRUN} 2 "${B}/test/gpu/gpu_coll")
set_tests_properties(gpu_coll_np2_staged PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_FORCE_STAGED=1;NCCLMPI_STAGE_CHUNK=64K")
add_test(gpu_coll_np3_pipelined ${GRUN} 3 "${B}/test/gpu/gpu_coll")
set_tests_properties(gpu_coll_np3_pipelined PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_STAGE_CHUNK=48K")
# blocking calls on the comm stream (event-ordered) instead of the default stream
add_test(gpu_coll_np1_commstream ${GRUN} 1 "${B}/test/gpu/gpu_coll" --quick)
set_tests_properties(gpu_coll_np1_commstream PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_CALC_STREAM=0")
add_test(gpu_stream_np1_commstream ${GRUN} 1 "${B}/test/gpu/gpu_stream")
set_tests_properties(gpu_stream_np1_commstream PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_CALC_STREAM=0")
# ranks mixing host and device buffers in one collective
add_test(gpu_misc_np3_agree ${GRUN} 3 "${B}/test/gpu/gpu_misc")
set_tests_properties(gpu_misc_np3_agree PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_AGREE=1")
# NCCL communicators made in MPI_Init and at communicator creation
add_test(gpu_misc_np2_eager ${GRUN} 2 "${B}/test/gpu/gpu_misc")
set_tests_properties(gpu_misc_np2_eager PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_EAGER=1")
