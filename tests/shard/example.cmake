# examples/mlp.c as a test: it exits non-zero if its loss does not fall. Run with no launcher (self
# backend) and under mpirun with 2 ranks.
if(TARGET example_mlp)
  add_test(NAME shard/example_mlp COMMAND example_mlp)
  add_test(NAME shard/example_mlp/np2 COMMAND ${FSDP_MPIRUN} 2 $<TARGET_FILE:example_mlp>)
  set_tests_properties(shard/example_mlp shard/example_mlp/np2 PROPERTIES LABELS "example;shard" TIMEOUT 120)
endif()
