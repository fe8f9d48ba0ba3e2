# tests/hosts/hosts.cmake — the trainer across several hosts (label hosts): network namespaces on a
# private bridge made by tools/hosts.sh, Open MPI over TCP between them. Needs root (CI runs as
# root): a test that cannot create its hosts fails. Each test uses its own host set, but the tests
# hold one RESOURCE_LOCK so that their timing checks do not compete for the cores.
if(TARGET fsdp-train AND NOT FSDP_SANITIZE)
  fsdp_test_executable(hosts_traffic ${PROJECT_SOURCE_DIR}/tests/hosts/hosts_traffic.c comm)
  add_test(NAME hosts/traffic
    COMMAND ${PROJECT_SOURCE_DIR}/tests/hosts/hosts_traffic.sh $<TARGET_FILE:hosts_traffic> ${PROJECT_BINARY_DIR}/tmp_hosts_traffic)
  foreach(part equiv fail)
    add_test(NAME hosts/${part}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/hosts/hosts_${part}.sh $<TARGET_FILE:fsdp-train> ${PROJECT_BINARY_DIR}/tmp_hosts_${part})
  endforeach()
  foreach(part traffic equiv fail)
    set_tests_properties(hosts/${part} PROPERTIES LABELS "script;hosts" TIMEOUT 300 RESOURCE_LOCK fsdp_hosts)
  endforeach()
endif()
