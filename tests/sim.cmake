# Provider model and simulator tests (issue 7): unit tests here, the CLI run in
# tests/integration/sim/.
sl_unit_test(test_provider sluice_provider)
sl_unit_test(test_provider_headers sluice_provider sluice_static)
sl_unit_test(test_sim sluice_sim)
target_compile_definitions(test_sim PRIVATE SL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME sim_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/sim/run.sh
                              $<TARGET_FILE:sluice> ${PROJECT_SOURCE_DIR})
set_tests_properties(sim_cli PROPERTIES LABELS integration)
