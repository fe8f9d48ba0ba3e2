# fsdp-train's memory plan, end-of-run report and trace (tests/train/plan_report.sh) on 1, 2 and 3
# ranks: exact prediction of master/optim/grad_shard/param_full/main_grad under LAZY/EAGER x
# SHARDED/NO_SYNC, activation within 5%, --plan == the run's prediction, a valid Chrome trace.
if(TARGET fsdp-train)
  foreach(np 1 2 3)
    add_test(NAME train/plan_report/np${np}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/plan_report.sh $<TARGET_FILE:fsdp-train>
              ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_plan_report_np${np} ${np})
    set_tests_properties(train/plan_report/np${np} PROPERTIES LABELS "script;train" TIMEOUT 300)
  endforeach()
endif()
# The default flow (evaluation, sample, checkpoint, resume) inside the plan: tests/train/plan_flow.sh.
if(TARGET fsdp-train)
  foreach(np 1 2)
    add_test(NAME train/plan_flow/np${np}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/plan_flow.sh $<TARGET_FILE:fsdp-train>
              ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_plan_flow_np${np} ${np})
    set_tests_properties(train/plan_flow/np${np} PROPERTIES LABELS "script;train" TIMEOUT 300)
  endforeach()
endif()
# --plan --fit BYTES (the solver) and --mem-limit (a run over it refused): tests/train/plan_fit.sh.
if(TARGET fsdp-train)
  add_test(NAME train/plan_fit
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/plan_fit.sh $<TARGET_FILE:fsdp-train>
            ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_plan_fit)
  set_tests_properties(train/plan_fit PROPERTIES LABELS "script;train" TIMEOUT 300)
endif()
# The Llama family's plan (tests/train/plan_llama.sh): every strategy, with and without recompute, exact.
if(TARGET fsdp-train)
  foreach(np 1 2)
    add_test(NAME train/plan_llama/np${np}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/plan_llama.sh $<TARGET_FILE:fsdp-train>
              ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_plan_llama_np${np} ${np})
    set_tests_properties(train/plan_llama/np${np} PROPERTIES LABELS "script;train" TIMEOUT 300)
  endforeach()
  # Every GEMM path this CPU offers (issue 39 item 1: "other" holds oneDNN's scratchpad, whose size
  # depends on the kernel oneDNN picks): the f32-compute path above; the native bf16 path (on a CPU
  # without bf16 matmul: bf16-via-f32); and both again with oneDNN capped at AVX2 (tests/kernels/
  # isa.cmake), where bf16 means bf16-via-f32.
  function(fsdp_plan_llama_variant name)
    add_test(NAME train/plan_llama/${name}/np1
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/plan_llama.sh $<TARGET_FILE:fsdp-train>
              ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_plan_llama_${name} 1)
    set_tests_properties(train/plan_llama/${name}/np1 PROPERTIES LABELS "script;train" TIMEOUT 300
      ENVIRONMENT "${ARGN}")
  endfunction()
  fsdp_plan_llama_variant(bf16 PLAN_MIXED=bf16)
  fsdp_plan_llama_variant(avx2 ${FSDP_AVX2_ENV})
  fsdp_plan_llama_variant(avx2-bf16 ${FSDP_AVX2_ENV} PLAN_MIXED=bf16)
endif()
