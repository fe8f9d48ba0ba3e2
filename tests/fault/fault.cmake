# tests/fault/fault.cmake — reliability tests of the fsdp-train program (label fault): a hang that
# becomes an error, a rank killed mid-training and mid-checkpoint, a full disk while saving
# (tests/fault/*.sh, with the LD_PRELOAD fault library fault_inject.c), bad values for every flag
# (test_flags.c), and, with -DFSDP_VALGRIND=ON, a short training run under valgrind memcheck.
if(TARGET fsdp-train)
  add_library(fsdp_fault_inject SHARED ${PROJECT_SOURCE_DIR}/tests/fault/fault_inject.c)
  target_compile_options(fsdp_fault_inject PRIVATE ${FSDP_WARN})
  target_link_libraries(fsdp_fault_inject PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(fsdp_fault_inject PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  # The preload would put a second sanitizer runtime into ASan processes: plain builds only.
  if(NOT FSDP_SANITIZE)
    foreach(part hang kill_train kill_ckpt disk_full)
      add_test(NAME fault/${part}
        COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_${part}.sh $<TARGET_FILE:fsdp-train>
                ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_fault_${part}
                $<TARGET_FILE:fsdp_fault_inject>)
      set_tests_properties(fault/${part} PROPERTIES LABELS "script;fault" TIMEOUT 600)
    endforeach()
  endif()
endif()
