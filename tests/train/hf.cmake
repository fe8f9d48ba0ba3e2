# The Hugging Face round trip (tests/train/hf_roundtrip.sh): transformers makes small random GPT-2s,
# fsdp.c loads them (--init-from) at 1-3 ranks, fine-tunes and exports; transformers checks every logit.
# Python: the test venv (.venv/, made by tools/test-deps.sh, which tools/test.sh calls); without
# transformers these tests fail rather than skip.
set(FSDP_TEST_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
    "Python with transformers for the Hugging Face tests (tools/test-deps.sh makes it)")
if(TARGET fsdp-train)
  foreach(part load finetune damaged text mask pack)
    add_test(NAME train/hf_${part}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/train/hf_roundtrip.sh $<TARGET_FILE:fsdp-train>
              ${PROJECT_SOURCE_DIR}/tests/mpirun.sh ${FSDP_TEST_PYTHON} ${PROJECT_BINARY_DIR}/tmp_hf_${part} ${part})
    set_tests_properties(train/hf_${part} PROPERTIES LABELS "script;train;hf" TIMEOUT 600)
  endforeach()
endif()
