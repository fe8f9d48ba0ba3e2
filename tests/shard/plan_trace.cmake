# A 3-rank trace gathered into one file must be valid Chrome-trace JSON with every rank (pid) present,
# balanced begin/end events and memory counters (checked by tests/core/check_trace.py).
if(TARGET mpi_plan_trace)
  add_test(NAME shard/plan_trace_json COMMAND sh -c
    "'${FSDP_MPIRUN}' 3 $<TARGET_FILE:mpi_plan_trace> '${PROJECT_BINARY_DIR}/tests/plan_trace_np3.json' && python3 '${PROJECT_SOURCE_DIR}/tests/core/check_trace.py' '${PROJECT_BINARY_DIR}/tests/plan_trace_np3.json' --ranks 3 --expect 'step on rank 2' --expect 'all-gather h0' --expect 'forward h0' --expect 'backward h1' --expect 'reduce-scatter h0' --expect 'optimizer h1'")
  set_tests_properties(shard/plan_trace_json PROPERTIES LABELS "script;shard" TIMEOUT 120)
endif()
