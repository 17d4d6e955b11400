# Action limits (issue 16): unit tests of src/limits and the shared conformance scenarios
# (tests/conformance/limits/*.scn), run here on the C library; the Redis port will run
# the same files. sluice_static gives the tests sl_strerror().
foreach(t test_limits_algorithms test_limits_set test_limits_adaptive test_limits_config)
  sl_unit_test(${t} sluice_limits sluice_static)
endforeach()

add_executable(limits_conformance_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits_runner.c
                                         ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenario.c)
target_include_directories(limits_conformance_runner PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(limits_conformance_runner PRIVATE sluice_limits)
file(GLOB SL_LIMIT_SCENARIOS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits/*.scn)
add_test(NAME conformance_limits COMMAND limits_conformance_runner ${SL_LIMIT_SCENARIOS})
set_tests_properties(conformance_limits PROPERTIES LABELS unit)
