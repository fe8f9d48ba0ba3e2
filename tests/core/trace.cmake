# The single-process trace file must be valid Chrome-trace JSON with balanced events and counters.
if(TARGET test_trace)
  add_test(NAME core/trace_json COMMAND sh -c
    "$<TARGET_FILE:test_trace> '${PROJECT_BINARY_DIR}/tests/trace_json.json' && python3 '${PROJECT_SOURCE_DIR}/tests/core/check_trace.py' '${PROJECT_BINARY_DIR}/tests/trace_json.json' --expect 'forward h0' --expect 'all-gather h0' --expect step")
  set_tests_properties(core/trace_json PROPERTIES LABELS "script;core" TIMEOUT 60)
endif()
