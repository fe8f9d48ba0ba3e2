# The Llama family against PyTorch (tests/model/llama_ref.c): tools/llama_reference.py writes one
# fixture per variant (transformers' Llama, Qwen2, Mistral, a SmolLM2-shaped Llama, and the tool's
# Qwen3 reference) and the Hugging Face folders of the same models; llama_ref checks each at 1, 2 and 3
# ranks. Python: the test venv (tools/test-deps.sh); without transformers these tests fail, not skip.
set(FSDP_TEST_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
    "Python with transformers for the Hugging Face tests (tools/test-deps.sh makes it)")
fsdp_test_executable(llama_ref ${PROJECT_SOURCE_DIR}/tests/model/llama_ref.c model)
set(FSDP_LLAMA_FX ${PROJECT_BINARY_DIR}/tmp_llama_fx)
add_test(NAME model/llama_fixtures
  COMMAND ${FSDP_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/tools/llama_reference.py fixture ${FSDP_LLAMA_FX} --hf)
set_tests_properties(model/llama_fixtures PROPERTIES LABELS "script;model;hf" TIMEOUT 600
  FIXTURES_SETUP llama_fx)
foreach(v llama qwen2 qwen3 smollm mistral llama_frozen llama_lora qwen2_lora gpt2_lora)
  foreach(np 1 2 3)
    add_test(NAME model/llama_ref/${v}/np${np}
      COMMAND ${FSDP_MPIRUN} ${np} $<TARGET_FILE:llama_ref> ${FSDP_LLAMA_FX}/${v}.bin)
    set_tests_properties(model/llama_ref/${v}/np${np} PROPERTIES LABELS "mpi;model;hf" TIMEOUT 300
      FIXTURES_REQUIRED llama_fx)
  endforeach()
endforeach()
# --init-from on the same folders: logits at 1 and 2 ranks against the reference (tests/model/llama_hf.sh).
foreach(np 1 2)
  add_test(NAME model/llama_hf/np${np}
    COMMAND ${PROJECT_SOURCE_DIR}/tests/model/llama_hf.sh $<TARGET_FILE:fsdp-train> ${FSDP_TEST_PYTHON}
            ${PROJECT_SOURCE_DIR}/tools/llama_reference.py ${FSDP_LLAMA_FX} ${np})
  set_tests_properties(model/llama_hf/np${np} PROPERTIES LABELS "script;model;hf" TIMEOUT 600
    FIXTURES_REQUIRED llama_fx)
endforeach()
# The round trip with text (tests/model/llama_export.sh): greedy sample == transformers' generate on a Llama
# and a Qwen2 with a tokenizer, fine-tune, export f32/bf16 that AutoModelForCausalLM + AutoTokenizer reload.
foreach(v llama qwen2)
  add_test(NAME model/llama_export/${v}
    COMMAND ${PROJECT_SOURCE_DIR}/tests/model/llama_export.sh $<TARGET_FILE:fsdp-train> ${FSDP_TEST_PYTHON}
            ${PROJECT_SOURCE_DIR}/tools/llama_reference.py ${PROJECT_BINARY_DIR}/tmp_llama_export_${v} ${v})
  set_tests_properties(model/llama_export/${v} PROPERTIES LABELS "script;model;hf" TIMEOUT 600)
endforeach()
