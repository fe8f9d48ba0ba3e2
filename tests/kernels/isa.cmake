# The CPU kind without bf16 instructions (AVX2-only hosts such as Zen 3), exercised on any x86 CPU by
# capping oneDNN's ISA (ONEDNN_MAX_CPU_ISA, read when oneDNN initialises): oneDNN then has no bf16
# matmul, so auto must choose the f32-compute path without a probe (test_gemm checks that, and every GEMM
# path this ISA runs: f32, bf16-via-f32, f32-compute), the model's recompute stays bitwise on each
# path (test_gpt), and both mixed paths match the PyTorch fixture (mpi_gpt_fixture, 1 and 2 ranks).
set(FSDP_AVX2_ENV "ONEDNN_MAX_CPU_ISA=AVX2")
add_test(NAME kernels/test_gemm/avx2 COMMAND test_gemm)
set_tests_properties(kernels/test_gemm/avx2 PROPERTIES LABELS "unit;kernels" TIMEOUT 600
  ENVIRONMENT "${FSDP_AVX2_ENV};FSDP_TEST_EXPECT_AUTO=f32-compute;FSDP_TEST_EXPECT_ISA=avx2")
add_test(NAME model/test_gpt/avx2 COMMAND test_gpt)
set_tests_properties(model/test_gpt/avx2 PROPERTIES LABELS "unit;model" TIMEOUT 600
  ENVIRONMENT "${FSDP_AVX2_ENV}")
foreach(np 1 2)
  add_test(NAME model/mpi_gpt_fixture/avx2/np${np} COMMAND ${FSDP_MPIRUN} ${np} $<TARGET_FILE:mpi_gpt_fixture>)
  set_tests_properties(model/mpi_gpt_fixture/avx2/np${np} PROPERTIES LABELS "mpi;model" TIMEOUT 600
    ENVIRONMENT "${FSDP_AVX2_ENV}")
endforeach()
