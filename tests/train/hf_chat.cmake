# prepare --jsonl (src/data/chat.c) with the real Qwen2 and Llama 3 tokenizers against transformers'
# apply_chat_template and assistant_masks (tests/train/chat_ref.py), --chat-format auto, every class of
# malformed row (FILE:LINE, nothing written), the output folder's checks and the up-front size limit
# (tests/train/chat_jsonl.sh). Python: the test venv (FSDP_TEST_PYTHON, from tests/train/hf.cmake, with
# transformers and jinja2 from tools/test-deps.sh).
if(TARGET fsdp-train)
  add_test(NAME train/chat_jsonl
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/chat_jsonl.sh $<TARGET_FILE:fsdp-train> ${FSDP_TEST_PYTHON}
            ${PROJECT_BINARY_DIR}/tmp_chat_jsonl)
  set_tests_properties(train/chat_jsonl PROPERTIES LABELS "script;train;hf" TIMEOUT 600)
endif()
