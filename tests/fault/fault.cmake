# tests/fault/fault.cmake — reliability tests of the fsdp-train program (label fault): a hang that
# becomes an error, ranks that disagree on their settings, data or checkpoint folder, a rank killed
# mid-training and mid-checkpoint, a full disk while saving, a NaN loss or grad norm (fault_nonfinite.sh)
# (tests/fault/*.sh, with the LD_PRELOAD fault library fault_inject.c), FIFOs, device nodes and
# self-overwrites, symbolic links never followed when deleting or writing, outputs that are
# inputs or other outputs, interrupted exports, concurrent runs, unwritable
# outputs and a full --metrics disk (fault_files.sh), files changed under the reader: flipped manifest
# bits, a NaN behind right checksums, a mapped file that shrinks (fault_integrity.sh), bad
# values for every flag
# (test_flags.c), and a short training run under valgrind memcheck (tools/valgrind-check.sh).
if(TARGET fsdp-train)
  add_library(fsdp_fault_inject SHARED ${PROJECT_SOURCE_DIR}/tests/fault/fault_inject.c)
  target_compile_options(fsdp_fault_inject PRIVATE ${FSDP_WARN})
  target_link_libraries(fsdp_fault_inject PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(fsdp_fault_inject PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  # The preload would put a second sanitizer runtime into ASan processes: plain builds only.
  if(NOT FSDP_SANITIZE)
    foreach(part hang kill_train kill_ckpt disk_full agree nonfinite signal)
      add_test(NAME fault/${part}
        COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_${part}.sh $<TARGET_FILE:fsdp-train>
                ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_fault_${part}
                $<TARGET_FILE:fsdp_fault_inject>)
      set_tests_properties(fault/${part} PROPERTIES LABELS "script;fault" TIMEOUT 600)
    endforeach()
    # A rank killed mid-training of a LoRA run: the adapter-only checkpoint resumes bit for bit.
    add_test(NAME fault/kill_train_lora
      COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_kill_train.sh $<TARGET_FILE:fsdp-train>
              ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_fault_kill_train_lora
              $<TARGET_FILE:fsdp_fault_inject> lora)
    set_tests_properties(fault/kill_train_lora PROPERTIES LABELS "script;fault" TIMEOUT 600)
    # Files that changed under us (issue 28 items 2, 3a): manifest bit flips, a NaN in a shard, a
    # mapped safetensors file that shrinks.
    foreach(part manifest nonfinite shrink)
      add_test(NAME fault/integrity_${part}
        COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_integrity.sh $<TARGET_FILE:fsdp-train>
                ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_integrity_${part}
                $<TARGET_FILE:fsdp_fault_inject> ${part})
      set_tests_properties(fault/integrity_${part} PROPERTIES LABELS "script;fault" TIMEOUT 300)
    endforeach()
    # Files that are not what they seem, concurrent runs, outputs that must not be lost (issue 14).
    foreach(part inputs outputs lock preflight metrics noop exitcodes symlinks conflicts interrupt)
      add_test(NAME fault/files_${part}
        COMMAND ${PROJECT_SOURCE_DIR}/tests/fault/fault_files.sh $<TARGET_FILE:fsdp-train>
                ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_files_${part}
                $<TARGET_FILE:fsdp_fault_inject> ${part})
      set_tests_properties(fault/files_${part} PROPERTIES LABELS "script;fault" TIMEOUT 300)
    endforeach()
  endif()
endif()

# Bad values for every flag (a unit test: also runs in the ASan+UBSan build).
if(TARGET fsdp_train)
  add_executable(test_flags ${PROJECT_SOURCE_DIR}/tests/fault/test_flags.c)
  target_compile_options(test_flags PRIVATE ${FSDP_WARN})
  target_include_directories(test_flags PRIVATE ${PROJECT_SOURCE_DIR}/tests ${CJSON_INCLUDE_DIR})
  target_link_libraries(test_flags PRIVATE fsdp_train)
  set_target_properties(test_flags PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME fault/test_flags COMMAND test_flags)
  set_tests_properties(fault/test_flags PROPERTIES LABELS "unit;fault" TIMEOUT 120)
endif()

# A short training run (1 and 2 ranks), resume, sample and export under valgrind memcheck: about a
# minute; registered when valgrind is installed (Debian package valgrind) and the build is not ASan.
find_program(FSDP_VALGRIND_EXE valgrind)
if(TARGET fsdp-train AND FSDP_VALGRIND_EXE AND NOT FSDP_SANITIZE)
  add_test(NAME fault/valgrind
    COMMAND ${PROJECT_SOURCE_DIR}/tools/valgrind-check.sh $<TARGET_FILE:fsdp-train> ${PROJECT_BINARY_DIR}/tmp_valgrind)
  set_tests_properties(fault/valgrind PROPERTIES LABELS "script;fault;valgrind" TIMEOUT 600)
endif()
