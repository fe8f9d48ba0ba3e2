# tools/plot turns a metrics JSONL file into a loss-curve PNG and a trace (written by test_trace) into
# a stacked memory-timeline PNG; a malformed metrics file must fail. Needs gnuplot and python3.
if(TARGET test_trace)
  add_test(NAME core/trace_plot COMMAND sh "${PROJECT_SOURCE_DIR}/tests/core/trace_plot.sh"
    "${PROJECT_SOURCE_DIR}/tools/plot" $<TARGET_FILE:test_trace> "${PROJECT_BINARY_DIR}/tests/trace_plot")
  set_tests_properties(core/trace_plot PROPERTIES LABELS "script;core" TIMEOUT 60)
endif()
