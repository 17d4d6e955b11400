# Redis backend tests: conformance scenarios on the engine (unit) and on sluice.lua in a real
# redis-server (integration); replicas, failure and Cluster tests start their own servers.
add_library(sluice_conformance_drive STATIC ${CMAKE_CURRENT_SOURCE_DIR}/conformance/drive.c
                                           ${CMAKE_CURRENT_SOURCE_DIR}/conformance/scenario.c)
target_link_libraries(sluice_conformance_drive PUBLIC sluice_backend_redis)
add_executable(conformance_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/runner.c)
target_link_libraries(conformance_runner PRIVATE sluice_conformance_drive)
file(GLOB SL_SCENARIOS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/conformance/*.scn)

add_test(NAME conformance_engine COMMAND conformance_runner ${SL_SCENARIOS})
set_tests_properties(conformance_engine PROPERTIES LABELS unit)

set(SL_WITH_REDIS ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/with-redis.sh)
add_test(NAME conformance_redis
         COMMAND ${SL_WITH_REDIS} sh -c "exec $<TARGET_FILE:conformance_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT \"$@\"" -- ${SL_SCENARIOS})
set_tests_properties(conformance_redis PROPERTIES LABELS integration)

add_executable(test_redis_replicas ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/test_redis_replicas.c)
target_link_libraries(test_redis_replicas PRIVATE sluice_backend_redis)
add_test(NAME redis_replicas COMMAND ${SL_WITH_REDIS} $<TARGET_FILE:test_redis_replicas> load)
add_test(NAME redis_kill_replica COMMAND ${SL_WITH_REDIS} $<TARGET_FILE:test_redis_replicas> kill)
add_test(NAME redis_failover COMMAND ${SL_WITH_REDIS} $<TARGET_FILE:test_redis_replicas> failure)
add_test(NAME redis_cluster COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/cluster.sh
                                    $<TARGET_FILE:conformance_runner> ${SL_SCENARIOS})
# Serial: Redis Functions are CPU-heavy, and on 2 cores a parallel neighbour makes the
# backend's own timeouts fire (what is tested here is correctness, not speed).
set_tests_properties(redis_replicas redis_kill_replica redis_failover redis_cluster
                     conformance_redis PROPERTIES LABELS integration TIMEOUT 300 RUN_SERIAL TRUE)
# The Redis commands one lease costs (INFO commandstats): a lease naming a task is one FCALL.
add_executable(test_redis_round_trips ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis/test_redis_round_trips.c)
target_link_libraries(test_redis_round_trips PRIVATE sluice_backend_redis)
add_test(NAME redis_round_trips COMMAND ${SL_WITH_REDIS} $<TARGET_FILE:test_redis_round_trips>)
set_tests_properties(redis_round_trips PROPERTIES LABELS integration TIMEOUT 60)
# The Cluster key slot (cluster.c): CRC16-XMODEM and hash tags.
sl_unit_test(test_redis_slot sluice_backend_redis)
# The differential runner (tests/conformance/differential.c): seeded random operations on the
# engine and on sluice.lua, every answer compared. A bounded run in the default suite; the
# long run (10^5 operations) with the slow suite (-DSL_SLOW_TESTS=ON; ctest -L parity_long):
# on 2026-12-07 seed 105 diverges there (a concurrency pool's queued ETA and position;
# docs/redis.md), so it is run deliberately, not by make test.
add_executable(differential_runner ${CMAKE_CURRENT_SOURCE_DIR}/conformance/differential.c)
target_link_libraries(differential_runner PRIVATE sluice_conformance_drive)
add_test(NAME differential_redis
         COMMAND ${SL_WITH_REDIS} sh -c "exec $<TARGET_FILE:differential_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT --seed 1 --seeds 3 --ops 2000")
set_tests_properties(differential_redis PROPERTIES LABELS integration TIMEOUT 120 RUN_SERIAL TRUE)
if(SL_SLOW_TESTS)
  add_test(NAME differential_redis_long
           COMMAND ${SL_WITH_REDIS} sh -c "exec $<TARGET_FILE:differential_runner> --redis 127.0.0.1:$SLUICE_REDIS_PORT --seed 100 --seeds 10 --ops 10000")
  set_tests_properties(differential_redis_long PROPERTIES LABELS "slow;parity_long" TIMEOUT 1800 RUN_SERIAL TRUE)
endif()
# The batch processing queues (sl_backend_batch_queue): one set of steps on the memory
# backend with its state file (unit) and on two replicas sharing a real redis-server.
add_executable(test_backend_batchq ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_backend_batchq.c)
target_link_libraries(test_backend_batchq PRIVATE sluice_backend_redis)
add_test(NAME backend_batchq_memory COMMAND test_backend_batchq)
set_tests_properties(backend_batchq_memory PROPERTIES LABELS unit)
add_test(NAME backend_batchq_redis
         COMMAND ${SL_WITH_REDIS} sh -c "exec $<TARGET_FILE:test_backend_batchq> --redis 127.0.0.1:$SLUICE_REDIS_PORT")
set_tests_properties(backend_batchq_redis PROPERTIES LABELS integration TIMEOUT 60)
