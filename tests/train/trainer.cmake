# Script tests of the fsdp-train program (tests/train/trainer_cli.sh), one ctest per part so they
# run in parallel and fail separately. The export check with PyTorch (tools/check_export.py) is part
# of cli_basic when /usr/bin/python3 can import torch (python3-torch; FSDP_WITH_TORCH=1
# tools/install-deps.sh installs it) at configure time.
if(TARGET fsdp-train)
  execute_process(COMMAND /usr/bin/python3 -c "import torch" RESULT_VARIABLE fsdp_no_torch OUTPUT_QUIET ERROR_QUIET)
  foreach(part basic resume reshard bad)
    add_test(NAME train/cli_${part}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/trainer_cli.sh $<TARGET_FILE:fsdp-train>
              ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_cli_${part} ${part})
    set_tests_properties(train/cli_${part} PROPERTIES LABELS "script;train" TIMEOUT 600)
  endforeach()
  if(fsdp_no_torch EQUAL 0)
    set_tests_properties(train/cli_basic PROPERTIES ENVIRONMENT "FSDP_CHECK_EXPORT=/usr/bin/python3")
  endif()
endif()
