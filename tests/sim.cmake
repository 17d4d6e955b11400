# Provider model and simulator tests (issue 7): unit tests here, the CLI run in
# tests/integration/sim/.
sl_unit_test(test_provider sluice_provider)
# The acceleration limit (src/provider/accel.c).
sl_unit_test(test_provider_accel sluice_provider)
sl_unit_test(test_provider_headers sluice_provider sluice_static)
sl_unit_test(test_sim sluice_sim)
target_compile_definitions(test_sim PRIVATE SL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
sl_unit_test(test_sim_bound sluice_sim)
target_compile_definitions(test_sim_bound PRIVATE SL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME sim_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/sim/run.sh
                              $<TARGET_FILE:sluice> ${PROJECT_SOURCE_DIR})
set_tests_properties(sim_cli PROPERTIES LABELS integration)

# The simulator checked against the emulator (bench/sim_vs_emu.sh, docs/sim.md): the proxy
# fleet proof's workload in `sluice sim` and for real through sluice-emu and sluiced, side
# by side. About two minutes of real time, and it prints rather than asserts: label slow,
# -DSL_SLOW_TESTS=ON (needs node and tests/node_modules).
find_program(SL_NODE node)
if(SL_SLOW_TESTS AND SL_NODE)
  add_test(NAME sim_vs_emu COMMAND ${PROJECT_SOURCE_DIR}/bench/sim_vs_emu.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(sim_vs_emu PROPERTIES LABELS slow TIMEOUT 600)
endif()

# issue 24's waste measures (bench/waste.sh): the sim sweep over the tight bound and real
# agent processes against sluice-emu, direct and through sluiced. About three minutes,
# prints rather than asserts: label slow, -DSL_SLOW_TESTS=ON.
if(SL_SLOW_TESTS AND SL_NODE)
  add_test(NAME waste COMMAND ${PROJECT_SOURCE_DIR}/bench/waste.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(waste PROPERTIES LABELS slow TIMEOUT 900)
endif()
