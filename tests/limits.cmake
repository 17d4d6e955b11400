# Action limits (issue 16): unit tests of src/limits and the shared conformance scenarios
# (tests/conformance/limits/*.scn), run on the C library and, in a real redis-server, on
# limits.lua (conformance_limits_redis). sluice_static gives the tests sl_strerror().
foreach(t test_limits_algorithms test_limits_set test_limits_adaptive test_limits_config)
  sl_unit_test(${t} sluice_limits sluice_static)
endforeach()

add_library(sluice_limits_drive STATIC ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits_drive.c
                                       ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenario.c)
target_include_directories(sluice_limits_drive PUBLIC ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(sluice_limits_drive PUBLIC sluice_limits sluice_backend_redis)
add_executable(limits_conformance_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits_runner.c)
target_link_libraries(limits_conformance_runner PRIVATE sluice_limits_drive)
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
# The differential runner of the action limits (tests/conformance/limits_differential.c):
# seeded random operations on the C library and on limits.lua, every answer compared. A
# bounded run in the default suite; the long run (10^5 operations) by label parity_long.
add_executable(limits_differential_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/limits_differential.c)
target_link_libraries(limits_differential_runner PRIVATE sluice_limits_drive)
add_test(NAME limits_differential_redis
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/with-redis.sh sh -c "exec $<TARGET_FILE:limits_differential_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT --seed 1 --seeds 3 --ops 2000")
set_tests_properties(limits_differential_redis PROPERTIES LABELS integration TIMEOUT 120 RUN_SERIAL TRUE)
if(SL_SLOW_TESTS) # the long run goes with the slow suite: ctest -L parity_long
  add_test(NAME limits_differential_redis_long
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/with-redis.sh sh -c "exec $<TARGET_FILE:limits_differential_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT --seed 100 --seeds 10 --ops 10000")
  set_tests_properties(limits_differential_redis_long PROPERTIES LABELS "slow;parity_long" TIMEOUT 1800 RUN_SERIAL TRUE)
endif()
