# hybrid_comms.c: the engine's communicators under HYBRID_SHARD (groups of 2 beside a replica group),
# so 4 ranks only.
fsdp_test_executable(hybrid_comms ${PROJECT_SOURCE_DIR}/tests/shard/hybrid_comms.c shard)
add_test(NAME shard/hybrid_comms/np4 COMMAND ${FSDP_MPIRUN} 4 $<TARGET_FILE:hybrid_comms>)
set_tests_properties(shard/hybrid_comms/np4 PROPERTIES LABELS "mpi;shard;comm;fault" TIMEOUT 300)
