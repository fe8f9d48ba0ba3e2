# Packed documents against the documents run one by one, GPT-2 and Llama, at 1 and 2 ranks
# (tests/model/pack_equiv.c).
fsdp_test_executable(pack_equiv ${PROJECT_SOURCE_DIR}/tests/model/pack_equiv.c model)
foreach(np 1 2)
  add_test(NAME model/pack_equiv/np${np} COMMAND ${FSDP_MPIRUN} ${np} $<TARGET_FILE:pack_equiv>)
  set_tests_properties(model/pack_equiv/np${np} PROPERTIES LABELS "mpi;model" TIMEOUT 300)
endforeach()
