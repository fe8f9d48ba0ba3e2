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
# fsdp-train --lora-rank end to end against PEFT (tests/train/lora.sh): the plan exact, adapter-only
# checkpoints, export --adapter loaded by PeftModel and export --merge by transformers to fsdp.c's logits,
# resume bit-identical, bad settings refused.
if(TARGET fsdp-train)
  add_test(NAME train/lora
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/lora.sh $<TARGET_FILE:fsdp-train> ${FSDP_MPIRUN}
            ${PROJECT_SOURCE_DIR}/.venv/bin/python ${PROJECT_BINARY_DIR}/tmp_llama_fx
            ${PROJECT_BINARY_DIR}/tmp_lora)
  set_tests_properties(train/lora PROPERTIES LABELS "script;train;hf" TIMEOUT 600
    FIXTURES_REQUIRED llama_fx)
endif()
