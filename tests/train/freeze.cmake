# fsdp-train --freeze end to end (tests/train/freeze.sh) on the Llama fixture's Hugging Face folder
# (model/llama_fixtures): unmatched globs refused, the plan exact, frozen tensors exported as they started,
# resumes bit-identical and across world sizes, a changed --freeze / frozen source / --seed refused.
# fsdp-train --lora-rank end to end against PEFT (tests/train/lora.sh): the plan exact, adapter-only
# checkpoints, export --adapter loaded by PeftModel and export --merge by transformers to fsdp.c's logits,
# resume bit-identical, bad settings refused.
if(TARGET fsdp-train)
  foreach(part freeze lora)
    add_test(NAME train/${part}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/${part}.sh $<TARGET_FILE:fsdp-train> ${FSDP_MPIRUN}
              ${PROJECT_SOURCE_DIR}/.venv/bin/python ${PROJECT_BINARY_DIR}/tmp_llama_fx
              ${PROJECT_BINARY_DIR}/tmp_${part})
    set_tests_properties(train/${part} PROPERTIES LABELS "script;train;hf" TIMEOUT 600
      FIXTURES_REQUIRED llama_fx)
  endforeach()
endif()
