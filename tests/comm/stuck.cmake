# tests/comm/stuck.cmake — the stuck watchdog (fsdp_comm_config.stuck_exit): a rank stuck inside a call
# into MPI ends itself with the named collective (stuck.sh, 2 ranks; label mpi, so the ASan+UBSan
# build runs it too).
fsdp_test_executable(stuck_prog ${PROJECT_SOURCE_DIR}/tests/comm/stuck_prog.c comm)
add_test(NAME comm/stuck COMMAND ${PROJECT_SOURCE_DIR}/tests/comm/stuck.sh ${FSDP_MPIRUN} $<TARGET_FILE:stuck_prog>)
set_tests_properties(comm/stuck PROPERTIES LABELS "mpi;comm" TIMEOUT 300)
