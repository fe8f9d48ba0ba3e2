# The layer DAG (tests/core/check_layers.py): no upward include, no include cycle, no call from a layer
# to one not below it, and no loop between the files of one layer (nm of each libfsdp_<layer>.a);
# check_layers_selftest plants each kind of fault in made-up trees and must find them all.
add_test(NAME core/check_layers COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/core/check_layers.py
         --src ${PROJECT_SOURCE_DIR} --build ${PROJECT_BINARY_DIR})
add_test(NAME core/check_layers_selftest COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/core/check_layers.py --selftest)
set_tests_properties(core/check_layers core/check_layers_selftest PROPERTIES LABELS "script;core;comm;shard" TIMEOUT 120)
