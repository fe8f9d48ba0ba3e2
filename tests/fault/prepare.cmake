# prepare and export write their folders as one unit (issue 28 item 1): SIGKILL at every file operation,
# a full disk (tests/fault/fault_prepare.sh, fault_export.sh, with the fault library fault_inject.c from
# fault.cmake).
if(TARGET fsdp_fault_inject AND NOT FSDP_SANITIZE)
  add_test(NAME fault/prepare_atomic
    COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_prepare.sh $<TARGET_FILE:fsdp-train>
            ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_fault_prepare
            $<TARGET_FILE:fsdp_fault_inject>)
  set_tests_properties(fault/prepare_atomic PROPERTIES LABELS "script;fault" TIMEOUT 600)
  add_test(NAME fault/export_atomic
    COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_export.sh $<TARGET_FILE:fsdp-train>
            ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_fault_export
            $<TARGET_FILE:fsdp_fault_inject>)
  set_tests_properties(fault/export_atomic PROPERTIES LABELS "script;fault" TIMEOUT 600)
endif()
