# Script tests of the fsdp-train program (tests/train/trainer_cli.sh), one ctest per part so they
# run in parallel and fail separately. The export check with PyTorch (tools/check_export.py) is part
# of cli_basic: /usr/bin/python3 with Debian's python3-torch (tools/test-deps.sh, which tools/test.sh
# calls, installs it); without torch that check fails rather than being skipped.
if(TARGET fsdp-train)
  foreach(part basic resume reshard shuffle bad)
    add_test(NAME train/cli_${part}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/trainer_cli.sh $<TARGET_FILE:fsdp-train>
              ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_cli_${part} ${part})
    set_tests_properties(train/cli_${part} PROPERTIES LABELS "script;train" TIMEOUT 600)
  endforeach()
  set_tests_properties(train/cli_basic PROPERTIES ENVIRONMENT "FSDP_CHECK_EXPORT=/usr/bin/python3")
endif()
# The thread policy: --threads 0 under a CPU affinity mask and ranks, the affinity warning, the passive
# OpenMP wait default (tests/train/threads.sh; needs taskset, Debian's util-linux).
if(TARGET fsdp-train)
  add_test(NAME train/threads
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/threads.sh $<TARGET_FILE:fsdp-train>
            ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${PROJECT_BINARY_DIR}/tmp_threads)
  set_tests_properties(train/threads PROPERTIES LABELS "script;train" TIMEOUT 300)
endif()
