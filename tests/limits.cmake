# Action limits (issue 16): unit tests of src/limits and the shared conformance scenarios
# (tests/conformance/limits/*.scn), run on the C library and, in a real redis-server, on
# limits.lua (conformance_limits_redis). sluice_static gives the tests sl_strerror().
foreach(t test_limits_algorithms test_limits_set test_limits_adaptive test_limits_config)
  sl_unit_test(${t} sluice_limits sluice_static)
endforeach()

add_executable(limits_conformance_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits_runner.c
                                         ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenario.c)
target_include_directories(limits_conformance_runner PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(limits_conformance_runner PRIVATE sluice_limits sluice_backend_redis)
file(GLOB SL_LIMIT_SCENARIOS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits/*.scn)
add_test(NAME conformance_limits COMMAND limits_conformance_runner ${SL_LIMIT_SCENARIOS})
set_tests_properties(conformance_limits PROPERTIES LABELS unit)
add_test(NAME conformance_limits_redis
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/with-redis.sh sh -c "exec $<TARGET_FILE:limits_conformance_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT \"$@\"" -- ${SL_LIMIT_SCENARIOS})
set_tests_properties(conformance_limits_redis PROPERTIES LABELS integration TIMEOUT 120)
# On a Redis Cluster of three masters: every key of a check is in its limit tree's slot.
add_test(NAME redis_cluster_limits COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/cluster.sh
                                           $<TARGET_FILE:limits_conformance_runner> ${SL_LIMIT_SCENARIOS})
set_tests_properties(redis_cluster_limits PROPERTIES LABELS integration TIMEOUT 300 RUN_SERIAL TRUE)
