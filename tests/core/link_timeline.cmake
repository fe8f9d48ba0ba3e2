# bench/link_timeline.py (bench/hosts_timeline.sh's analysis) on a made-up trace and link samples:
# the idle time, the link use and the spans it names; a trace without clock_origin_s is refused.
add_test(NAME core/link_timeline COMMAND sh "${PROJECT_SOURCE_DIR}/tests/core/link_timeline.sh"
  "${PROJECT_SOURCE_DIR}/bench/link_timeline.py" "${PROJECT_BINARY_DIR}/tests/link_timeline")
set_tests_properties(core/link_timeline PROPERTIES LABELS "script;core" TIMEOUT 60)
