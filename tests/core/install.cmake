# install.cmake — registers core/install: `cmake --install` into a temporary prefix, then a consumer
# program built outside the tree with only pkg-config (tests/core/install_check.sh). Needs pkg-config
# and the whole project built (the install step copies every installed target).
add_test(NAME core/install
  COMMAND ${PROJECT_SOURCE_DIR}/tests/core/install_check.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
          ${CMAKE_C_COMPILER} $<IF:$<BOOL:${FSDP_SANITIZE}>,1,0>)
set_tests_properties(core/install PROPERTIES LABELS "install;core" TIMEOUT 300)
