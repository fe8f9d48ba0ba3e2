# Every kernel a model runs goes through the decoder's kernels context (the row of its engine's device):
# no direct call of a kernels-table entry in src/model (tests/model/check_kernel_calls.py); the
# selftest plants one and must find it.
add_test(NAME model/kernel_calls COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/model/check_kernel_calls.py)
add_test(NAME model/kernel_calls_selftest COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/model/check_kernel_calls.py
         --selftest)
set_tests_properties(model/kernel_calls model/kernel_calls_selftest PROPERTIES LABELS "script;model" TIMEOUT 60)
