# The step line's speed fields (tflops, MFU against the start-up GEMM peak, straggler) and the outlier
# guard --skip-update-z: tests/train/perf_flow.sh (tests/train/check_perf.py's independent FLOP count).
if(TARGET fsdp-train)
  add_test(NAME train/perf_flow
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/perf_flow.sh $<TARGET_FILE:fsdp-train>
            ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_perf_flow)
  set_tests_properties(train/perf_flow PROPERTIES LABELS "script;train" TIMEOUT 300)
endif()
# End-to-end training on the simulated device against the CPU (tests/train/sim_train.sh).
if(TARGET fsdp-train)
  add_test(NAME train/sim_train
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/sim_train.sh $<TARGET_FILE:fsdp-train> ${FSDP_MPIRUN}
            ${PROJECT_BINARY_DIR}/tmp_sim_train)
  set_tests_properties(train/sim_train PROPERTIES LABELS "script;train" TIMEOUT 600)
endif()
