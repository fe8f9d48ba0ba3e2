# Checkpoint retention (--keep-last, --keep-every) and --export-final: tests/train/retention.sh.
if(TARGET fsdp-train)
  add_test(NAME train/retention
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/retention.sh $<TARGET_FILE:fsdp-train>
            ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_retention)
  set_tests_properties(train/retention PROPERTIES LABELS "script;train" TIMEOUT 300)
endif()
