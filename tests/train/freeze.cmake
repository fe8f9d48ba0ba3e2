# fsdp-train --freeze end to end (tests/train/freeze.sh) on the Llama fixture's Hugging Face folder
# (model/llama_fixtures): unmatched globs refused, the plan exact, frozen tensors exported as they started,
# resumes bit-identical and across world sizes, a changed --freeze / frozen source / --seed refused.
if(TARGET fsdp-train)
  add_test(NAME train/freeze
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/freeze.sh $<TARGET_FILE:fsdp-train> ${FSDP_MPIRUN}
            ${PROJECT_SOURCE_DIR}/.venv/bin/python ${PROJECT_BINARY_DIR}/tmp_llama_fx
            ${PROJECT_BINARY_DIR}/tmp_freeze)
  set_tests_properties(train/freeze PROPERTIES LABELS "script;train;hf" TIMEOUT 600
    FIXTURES_REQUIRED llama_fx)
endif()
