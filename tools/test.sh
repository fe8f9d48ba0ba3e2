#!/usr/bin/env bash
# The test command: builds the normal configuration (build/) and the ASan+UBSan one (build-asan/),
# runs every test in the first and the unit + MPI tests in the second.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Test-only packages: Debian's python3-torch and the .venv with transformers (tools/test-deps.sh).
tools/test-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDP_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900
if [ "${FSDP_SKIP_ASAN:-0}" != 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFSDP_SANITIZE=ON -DFSDP_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|mpi' --timeout 900
fi
# Fuzzing (tests/fuzz/README.md): clang's libFuzzer with ASan+UBSan, each parser's target for
# FSDP_FUZZ_SECONDS (20) from its seed corpus; a crash, leak or sanitizer report fails.
if [ "${FSDP_SKIP_FUZZ:-0}" != 1 ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DFSDP_FUZZ=ON -DFSDP_SANITIZE=ON -DFSDP_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_all
  ctest --test-dir build-fuzz --output-on-failure -j"$jobs" -L fuzz --timeout 300
fi
