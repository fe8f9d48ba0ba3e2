# tests/fuzz/fuzz.cmake — the parsers of outside data under fuzzing (tests/fuzz/README.md).
# Every build: each target's seed corpus (tests/fuzz/corpus/NAME/, regression inputs included) is
# replayed once through the target by replay_main.c (test fuzz/replay_NAME, label unit), so gcc and
# the ASan+UBSan build check them too. A clang build with -DFSDP_FUZZ=ON -DFSDP_SANITIZE=ON also
# builds the libFuzzer binaries (target fuzz_all) and registers fuzz/NAME (label fuzz): a run of
# FSDP_FUZZ_SECONDS from the seed corpus that fails on any crash, leak, sanitizer report or timeout.
set(FSDP_FUZZ_TARGETS tokens meta manifest shard cmdline safetensors bpe)
set(FSDP_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
option(FSDP_FUZZ "Build the libFuzzer targets (needs clang and FSDP_SANITIZE=ON)" OFF)
set(FSDP_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer test runs")

if(TARGET fsdp_train)
  foreach(t ${FSDP_FUZZ_TARGETS})
    add_executable(replay_${t} ${FSDP_FUZZ_DIR}/fuzz_${t}.c ${FSDP_FUZZ_DIR}/replay_main.c)
    target_compile_options(replay_${t} PRIVATE ${FSDP_WARN})
    target_include_directories(replay_${t} PRIVATE ${CJSON_INCLUDE_DIR})
    target_link_libraries(replay_${t} PRIVATE fsdp_train)
    set_target_properties(replay_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
    add_test(NAME fuzz/replay_${t} COMMAND replay_${t} ${FSDP_FUZZ_DIR}/corpus/${t})
    set_tests_properties(fuzz/replay_${t} PROPERTIES LABELS "unit;corpus" TIMEOUT 120)
  endforeach()
endif()

if(FSDP_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FSDP_FUZZ needs clang's libFuzzer: configure with CC=clang (compiler is ${CMAKE_C_COMPILER_ID})")
  endif()
  if(NOT FSDP_SANITIZE)
    message(FATAL_ERROR "FSDP_FUZZ needs -DFSDP_SANITIZE=ON (fuzzing without ASan+UBSan misses most findings)")
  endif()
  # Coverage feedback from the code under test: the trainer's parsers and the core helpers they use.
  foreach(l train io data checkpoint)
    target_compile_options(fsdp_${l} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()
  target_compile_options(fsdp_core PRIVATE -fsanitize=fuzzer-no-link)
  add_custom_target(fuzz_all)
  foreach(t ${FSDP_FUZZ_TARGETS})
    add_executable(fuzz_${t} ${FSDP_FUZZ_DIR}/fuzz_${t}.c)
    target_compile_options(fuzz_${t} PRIVATE ${FSDP_WARN} -fsanitize=fuzzer)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_include_directories(fuzz_${t} PRIVATE ${CJSON_INCLUDE_DIR})
    target_link_libraries(fuzz_${t} PRIVATE fsdp_train)
    set_target_properties(fuzz_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/fuzz)
    add_dependencies(fuzz_all fuzz_${t})
    add_test(NAME fuzz/${t}
      COMMAND ${FSDP_FUZZ_DIR}/run_fuzz.sh $<TARGET_FILE:fuzz_${t}> ${FSDP_FUZZ_DIR}/corpus/${t}
              ${PROJECT_BINARY_DIR}/fuzz_work/${t} ${FSDP_FUZZ_SECONDS})
    set_tests_properties(fuzz/${t} PROPERTIES LABELS "fuzz" TIMEOUT 300)
  endforeach()
endif()
