# Hugging Face folders onto the simulated devices (tests/train/hf_device.sh): every tensor the same as on
# the CPU, also where the loader goes through the engine's copies (no host access).
if(TARGET fsdp-train)
  fsdp_test_executable(hf_device_tool ${PROJECT_SOURCE_DIR}/tests/train/hf_device_tool.c train)
  add_test(NAME train/hf_device
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/hf_device.sh $<TARGET_FILE:fsdp-train> $<TARGET_FILE:hf_device_tool>
            ${FSDP_MPIRUN} ${PROJECT_BINARY_DIR}/tmp_hf_device)
  set_tests_properties(train/hf_device PROPERTIES LABELS "script;train" TIMEOUT 600)
endif()
