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
# small device allreduces on the one-shot kernels (one GPU per rank), or their fallbacks
foreach(np 2 3 4)
  add_test(gpu_oneshot_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_oneshot")
  set_tests_properties(gpu_oneshot_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NM_KERNELS=${KERNELS}")
endforeach()
add_test(gpu_oneshot_np2_threads ${GRUN} 2 "${B}/test/gpu/gpu_oneshot" --threads)
set_tests_properties(gpu_oneshot_np2_threads PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
add_test(gpu_oneshot_np2_off ${GRUN} 2 "${B}/test/gpu/gpu_oneshot" --quick)
set_tests_properties(gpu_oneshot_np2_off PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_ONESHOT=0")
# small nonblocking allreduces of a group sharing NCCL calls: the default (exact, which leaves
# one-rank communicators alone), every type and size (all: on one GPU, the fused path on real
# NCCL), and off
foreach(np 1 2 3 4)
  add_test(gpu_fuse_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_fuse")
  set_tests_properties(gpu_fuse_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
add_test(gpu_fuse_np1_all ${GRUN} 1 "${B}/test/gpu/gpu_fuse")
set_tests_properties(gpu_fuse_np1_all PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_FUSE=all")
add_test(gpu_fuse_np3_all ${GRUN} 3 "${B}/test/gpu/gpu_fuse" 6)
set_tests_properties(gpu_fuse_np3_all PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_FUSE=all")
add_test(gpu_fuse_np2_off ${GRUN} 2 "${B}/test/gpu/gpu_fuse" 4)
set_tests_properties(gpu_fuse_np2_off PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_FUSE=off")
# device buffers in the calls ncclmpi does not run on device memory: MPI_ERR_BUFFER; flush points
add_test(gpu_reject_np2 ${GRUN} 2 "${B}/test/gpu/gpu_reject")
set_tests_properties(gpu_reject_np2 PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)
# the staged path on every rank, whatever the GPUs; small chunks so large counts pipeline
add_test(gpu_coll_np2_staged ${GRUN} 2 "${B}/test/gpu/gpu_coll")
set_tests_properties(gpu_coll_np2_staged PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_FORCE_STAGED=1;NCCLMPI_STAGE_CHUNK=64K")
add_test(gpu_coll_np3_pipelined ${GRUN} 3 "${B}/test/gpu/gpu_coll")
set_tests_properties(gpu_coll_np3_pipelined PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "NCCLMPI_STAGE_CHUNK=48K")
# ranks sharing the GPU: blocking Allreduce, Reduce and Bcast on it through CUDA IPC from the first
# byte, in chunks of 64 KiB (where every rank has its own GPU: NCCL, as gpu_coll_np*)
foreach(np 2 3 4)
  add_test(gpu_coll_np${np}_shared ${GRUN} ${np} "${B}/test/gpu/gpu_coll")
  set_tests_properties(gpu_coll_np${np}_shared PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCLMPI_SHARED_MIN=0;NCCLMPI_SHARED_SLOT=64K;NM_EXPECT_SHARED=${KERNELS}")
endforeach()
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

# per-rank layouts and signatures on the shared GPU's path (every size, small slots: many chunks)
foreach(sc layout_gather layout_bcast layout_reduce bottom signature_pipelined fuzz use_churn use_churn_threads)
  add_test(gpu_hazard_${sc}_np3_shared ${GRUN} 3 "${B}/test/gpu/gpu_hazard" ${sc})
  set_tests_properties(gpu_hazard_${sc}_np3_shared PROPERTIES LABELS "gpu" TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCLMPI_SHARED_MIN=0;NCCLMPI_SHARED_SLOT=64K")
endforeach()
# gpu_hazard: adversarial scenarios, one per test (test/gpu/gpu_hazard.c), at 2 and 3 ranks (3 on a
# 2-GPU machine shares a GPU, so the staged path runs).
set(NM_HAZARD "${B}/test/gpu/gpu_hazard")
set(NM_HAZARD_SCENARIOS layout_gather layout_bcast layout_reduce empty_gatherv_first empty_alltoallv_first
    empty_scatterv bottom signature_pipelined uint8_sum agree_mixed threads thread_comms first_nb_crossing
    comm_free_outstanding dup_churn use_churn use_churn_threads progress coalesce_triggers explicit_group field_range group_mix fault fault_nb fuzz envelope_order
    connect_crossing cyclic_comms reset_final reset_reuse)
set(NM_HAZARD_NP3_SKIP fault fault_nb)  # NCCL launches only
foreach(sc IN LISTS NM_HAZARD_SCENARIOS)
  foreach(np 2 3)
    list(FIND NM_HAZARD_NP3_SKIP ${sc} nm_skip)
    if(np EQUAL 3 AND NOT nm_skip EQUAL -1)
      continue()
    endif()
    add_test(gpu_hazard_${sc}_np${np} ${GRUN} ${np} "${NM_HAZARD}" ${sc})
    set_tests_properties(gpu_hazard_${sc}_np${np} PROPERTIES LABELS "gpu" TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
foreach(np 2 3)
  # host and device buffers in one collective
  set_tests_properties(gpu_hazard_uint8_sum_np${np} gpu_hazard_agree_mixed_np${np} PROPERTIES
                       ENVIRONMENT "NCCLMPI_AGREE=1")
  # the 20th NCCL launch on world rank 0 fails; the other ranks time out after 10 s (NCCL route
  # only: at np 3 on 2 GPUs the ranks share a GPU and run staged, with no launch to fail)
  if(np EQUAL 2)
    set_tests_properties(gpu_hazard_fault_np${np} gpu_hazard_fault_nb_np${np} PROPERTIES
                         ENVIRONMENT "NCCLMPI_FAULT=0:20;NCCLMPI_TIMEOUT=10")
  endif()
  # Open MPI 4.1.4's op/avx adds 8-bit integers with saturation (MPI_SUM of 100 MPI_UNSIGNED_CHAR
  # gives 0xff): the same scenario without that component, to tell its bug from ncclmpi's
  add_test(gpu_hazard_uint8_sum_np${np}_noavx ${GRUN} ${np} "${NM_HAZARD}" uint8_sum)
  set_tests_properties(gpu_hazard_uint8_sum_np${np}_noavx PROPERTIES LABELS "gpu" TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCLMPI_AGREE=1;OMPI_MCA_op=^avx")
endforeach()
# coalesce_triggers under NCCLMPI_AGREE (a blocking collective starts with a route vote)
foreach(np 2 3)
  add_test(gpu_hazard_coalesce_triggers_np${np}_agree ${GRUN} ${np} "${NM_HAZARD}" coalesce_triggers)
  set_tests_properties(gpu_hazard_coalesce_triggers_np${np}_agree PROPERTIES LABELS "gpu" TIMEOUT 180
                       SKIP_RETURN_CODE 77 ENVIRONMENT "NCCLMPI_AGREE=1")
endforeach()
# envelope_order with device envelopes (NCCLMPI_P2P_ENVELOPE=device, every device send of 4 KiB
# or more): nonblocking sends queue their envelopes until the next call that may wait; and with
# them off (every device message staged)
foreach(np 2 3)
  set_tests_properties(gpu_hazard_envelope_order_np${np} PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=off")
  add_test(gpu_hazard_envelope_order_np${np}_envelope ${GRUN} ${np} "${NM_HAZARD}" envelope_order)
  set_tests_properties(gpu_hazard_envelope_order_np${np}_envelope PROPERTIES LABELS "gpu" TIMEOUT 180
                       SKIP_RETURN_CODE 77 ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device;NCCLMPI_P2P_ENVELOPE_MIN=4096")
endforeach()
# host messages over TCP while a device collective waits. run_mpi.sh exports OMPI_MCA_pml and
# OMPI_MCA_btl itself, over these ENVIRONMENT values, so the same settings also go on the mpirun
# command line (gpu_run.sh passes its arguments through in order; --mca beats the environment).
add_test(gpu_hazard_progress_np2_tcp ${GRUN} 2 --mca pml ob1 --mca btl tcp,self "${NM_HAZARD}" progress)
set_tests_properties(gpu_hazard_progress_np2_tcp PROPERTIES LABELS "gpu" TIMEOUT 180 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMPI_MCA_pml=ob1;OMPI_MCA_btl=tcp,self")
# rank 1 is killed; the survivors must get an error within 15 s (NCCLMPI_TIMEOUT=5)
# (np 2: one GPU per rank, the NCCL route; a staged call waits inside the real MPI, which has
# no timeout of its own)
add_test(gpu_hazard_kill_np2 sh "${S}/test/gpu/gpu_hazard_kill.sh" "${B}" 2)
set_tests_properties(gpu_hazard_kill_np2 PROPERTIES LABELS "gpu" TIMEOUT 180 SKIP_RETURN_CODE 77)

# The same scenarios on malloc buffers (--host), through ncclmpi's host path (label mpi): checks the
# scenarios themselves against plain MPI semantics on machines without a GPU. fault and kill are
# device only. uint8_sum runs without Open MPI 4.1.4's saturating op/avx component (see above).
foreach(sc IN LISTS NM_HAZARD_SCENARIOS)
  if(NOT sc STREQUAL "fault" AND NOT sc STREQUAL "fault_nb")
    foreach(np 2 3)
      add_test(mpi_hazard_${sc}_np${np}_host "${RUN}" ${np} preload "${NM_HAZARD}" --host ${sc})
      set_tests_properties(mpi_hazard_${sc}_np${np}_host PROPERTIES LABELS "mpi" TIMEOUT 120)
    endforeach()
  endif()
endforeach()
set_tests_properties(mpi_hazard_uint8_sum_np2_host mpi_hazard_uint8_sum_np3_host PROPERTIES
                     ENVIRONMENT "OMPI_MCA_op=^avx")
add_test(mpi_hazard_progress_np2_host_tcp "${RUN}" 2 preload --mca pml ob1 --mca btl tcp,self "${NM_HAZARD}" --host progress)
set_tests_properties(mpi_hazard_progress_np2_host_tcp PROPERTIES LABELS "mpi" TIMEOUT 120)

# gpu_p2p: random point-to-point matching (wildcards, probes, truncation, cancel, MPI_PROC_NULL,
# self sends) on device, pinned and malloc buffers, checked against the plan every rank derives
# from the seed; on malloc buffers only with --host (label mpi, up to 1 MiB messages). Seed 1 with
# envelopes off (every device message staged), seed 2 with the default settings (envelopes on a
# GPU machine).
foreach(np 2 3 4)
  foreach(seed 1 2)
    add_test(gpu_p2p_np${np}_seed${seed} ${GRUN} ${np} "${B}/test/gpu/gpu_p2p" --seed ${seed})
    set_tests_properties(gpu_p2p_np${np}_seed${seed} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
  set_tests_properties(gpu_p2p_np${np}_seed1 PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=off")
endforeach()
foreach(np 2 3)
  add_test(mpi_p2p_fuzz_np${np}_host "${RUN}" ${np} preload "${B}/test/gpu/gpu_p2p" --host --max 1048576 --seed ${np})
  set_tests_properties(mpi_p2p_fuzz_np${np}_host PROPERTIES LABELS "mpi" TIMEOUT 120)
endforeach()

# gpu_neighbor: neighbourhood collectives (ring, 2-D grid with missing neighbours, dist graph) on
# device buffers (as point-to-point where envelopes reach device memory, else staged), against the
# real MPI's blocking calls on host copies; gpu_persist: persistent
# point-to-point requests on device buffers restarted 1000 times around a ring (device and host
# senders, every completion form, cancel, free while active). Both on malloc buffers with --host.
# gpu_persist here with envelopes off (staged persistent requests; with envelopes: below).
foreach(prog neighbor persist)
  foreach(np 1 2 3 4)
    add_test(gpu_${prog}_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_${prog}")
    set_tests_properties(gpu_${prog}_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
  foreach(np 2 3)
    add_test(mpi_${prog}_np${np}_host "${RUN}" ${np} preload "${B}/test/gpu/gpu_${prog}" --host)
    set_tests_properties(mpi_${prog}_np${np}_host PROPERTIES LABELS "mpi" TIMEOUT 120)
  endforeach()
endforeach()
foreach(np 1 2 3 4)
  set_tests_properties(gpu_persist_np${np} PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=off")
endforeach()

# a rank that never uses CUDA receives device messages (staged; and as envelopes, whose payload
# it reads from the sender's GPU after loading the driver) and sends host data to device memory
add_test(gpu_nocuda_np2 ${GRUN} 2 "${B}/test/gpu/gpu_nocuda")
add_test(gpu_nocuda_np2_envelope ${GRUN} 2 "${B}/test/gpu/gpu_nocuda")
set_tests_properties(gpu_nocuda_np2 gpu_nocuda_np2_envelope PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(gpu_nocuda_np2 PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=off")
set_tests_properties(gpu_nocuda_np2_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device")

# point-to-point envelopes with device payloads, forced (NCCLMPI_P2P_ENVELOPE=device, from 4 KiB):
# device sends of 4 KiB and more travel as envelopes pulled over CUDA IPC; the random matching
# fuzzer, persistent requests and the neighbourhood collectives must behave as before
foreach(np 2 3 4)
  add_test(gpu_p2p_np${np}_envelope ${GRUN} ${np} "${B}/test/gpu/gpu_p2p" --seed 3${np})
  add_test(gpu_persist_np${np}_envelope ${GRUN} ${np} "${B}/test/gpu/gpu_persist")
  add_test(gpu_neighbor_np${np}_envelope ${GRUN} ${np} "${B}/test/gpu/gpu_neighbor" --big)
  set_tests_properties(gpu_p2p_np${np}_envelope gpu_persist_np${np}_envelope gpu_neighbor_np${np}_envelope PROPERTIES LABELS "gpu" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device;NCCLMPI_P2P_ENVELOPE_MIN=4096")
endforeach()

# a device receive in one thread while another thread's probe takes its message out of matching:
# with device envelopes (the probe meets one) and with the default settings
# a device send while another thread of the rank waits in the real MPI, envelopes on (default) and off
add_test(gpu_blocked_thread_np2 ${GRUN} 2 "${B}/test/gpu/gpu_blocked_thread")
add_test(gpu_blocked_thread_np2_staged ${GRUN} 2 "${B}/test/gpu/gpu_blocked_thread")
set_tests_properties(gpu_blocked_thread_np2 gpu_blocked_thread_np2_staged PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(gpu_blocked_thread_np2_staged PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=off")
add_test(gpu_probe_race_np2_envelope ${GRUN} 2 "${B}/test/gpu/gpu_probe_race")
add_test(gpu_probe_race_np2 ${GRUN} 2 "${B}/test/gpu/gpu_probe_race")
set_tests_properties(gpu_probe_race_np2_envelope gpu_probe_race_np2 PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77)
set_tests_properties(gpu_probe_race_np2_envelope PROPERTIES ENVIRONMENT "NCCLMPI_P2P_ENVELOPE=device;NCCLMPI_P2P_ENVELOPE_MIN=4096")
# local calls on device buffers (packing, MPI_Reduce_local, MPI-IO), staged
foreach(np 1 2 4)
  add_test(gpu_local_staged_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_local_staged")
  set_tests_properties(gpu_local_staged_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# one-sided communication on windows in device memory (CUDA IPC)
foreach(np 1 2 3 4)
  add_test(gpu_rma_device_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_rma_device")
  set_tests_properties(gpu_rma_device_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# the last rank never touches CUDA itself (a host window; ncclmpi loads the driver to reach the others')
foreach(np 2 3)
  add_test(gpu_rma_device_hostrank_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_rma_device")
  set_tests_properties(gpu_rma_device_hostrank_np${np} PROPERTIES LABELS "gpu" TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "RMA_DEVICE_HOSTRANK=1")
endforeach()
# MPICH's stream extension: enqueued calls on a CUDA stream (NCCL's route with a GPU per rank, the
# shared GPU's otherwise)
foreach(np 1 2 3 4)
  add_test(gpu_mpix_stream_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_mpix_stream")
  set_tests_properties(gpu_mpix_stream_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# two threads enqueueing on communicators of their own (MPI_THREAD_MULTIPLE)
foreach(np 1 2)
  add_test(gpu_mpix_stream_threads_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_mpix_stream")
  set_tests_properties(gpu_mpix_stream_threads_np${np} PROPERTIES LABELS "gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "MPIX_STREAM_THREADS=1")
endforeach()
# messages above 2^31 bytes (issue 38, 4d): the staged pipeline, and at 2 ranks a receive through a
# non-contiguous datatype with device envelopes and a persistent receive (refused with MPI_ERR_COUNT, or started and received whole)
foreach(np 1 2)
  add_test(gpu_big_np${np} ${GRUN} ${np} "${B}/test/gpu/gpu_big")
  set_tests_properties(gpu_big_np${np} PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "NCCLMPI_FORCE_STAGED=1;NCCLMPI_P2P_ENVELOPE=device")
endforeach()
