# Byte-level BPE (src/data/bpe.c) against the `tokenizers` library (tests/train/bpe_check.sh): a BPE
# trained by tokenizers on part of the default corpus, then ids equal on the whole corpus and on a file of
# hard cases, exact decode(encode(x)), prepare --tokenizer, and malformed tokenizer.json files refused.
# Python: .venv-tok/ (tools/test-deps.sh makes it), whose tokenizers is the version the Unicode tables
# follow (0.23.3; the test venv's transformers 4.x pins an older one); without it the tests fail.
set(FSDP_TOKENIZERS_PYTHON ${PROJECT_SOURCE_DIR}/.venv-tok/bin/python CACHE FILEPATH
    "Python with tokenizers 0.23.3 for the tokenizer tests (tools/test-deps.sh makes it)")
if(TARGET fsdp-train)
  fsdp_test_executable(bpe_tool ${PROJECT_SOURCE_DIR}/tests/train/bpe_tool.c train)
  add_test(NAME train/bpe
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/bpe_check.sh $<TARGET_FILE:fsdp-train> $<TARGET_FILE:bpe_tool>
            ${FSDP_TOKENIZERS_PYTHON} ${PROJECT_BINARY_DIR}/tmp_bpe)
  set_tests_properties(train/bpe PROPERTIES LABELS "script;train;hf" TIMEOUT 600)
endif()
# The pre-tokenizers of Llama 3, Qwen2 (NFC) and SmolLM too: the real vocabularies (llama.cpp's GGUF test
# files, fetched by tools/test-deps.sh) and random BPEs against tokenizers (tests/train/bpe_real.sh).
if(TARGET bpe_tool)
  add_test(NAME train/bpe_real
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/bpe_real.sh $<TARGET_FILE:bpe_tool> ${FSDP_TOKENIZERS_PYTHON}
            ${PROJECT_BINARY_DIR}/tmp_bpe_real ${FSDP_TEST_PYTHON})
  set_tests_properties(train/bpe_real PROPERTIES LABELS "script;train;hf" TIMEOUT 600)
endif()
# Every Unicode code point classed as tokenizers 0.23.3 classes it (tests/train/unicode_classes.sh).
if(TARGET bpe_tool)
  add_test(NAME train/unicode_classes
    COMMAND ${PROJECT_SOURCE_DIR}/tests/train/unicode_classes.sh $<TARGET_FILE:bpe_tool> ${FSDP_TOKENIZERS_PYTHON}
            ${PROJECT_BINARY_DIR}/tmp_unicode_classes)
  set_tests_properties(train/unicode_classes PROPERTIES LABELS "script;train;hf" TIMEOUT 600)
endif()
