# bench_redis: lease-then-settle round trips through the redis backend (one and two replicas on
# one Redis) against the memory backend; bench/redis.sh adds redis-benchmark FCALL figures and
# bench_redis_queue's cost per call by queue depth.
add_executable(bench_redis ${CMAKE_CURRENT_SOURCE_DIR}/redis.c)
target_link_libraries(bench_redis PRIVATE sluice_backend_redis)
# bench_redis_queue: Redis CPU per call of the library at 0, 1,000 and 10,000 queued.
add_executable(bench_redis_queue ${CMAKE_CURRENT_SOURCE_DIR}/redis_queue.c)
target_link_libraries(bench_redis_queue PRIVATE sluice_backend_redis)
# bench_redis_limits: one action-limit check per FCALL of limits.lua against seed 001's ZSET
# pipeline, same Redis, same run (bench/redis_limits.sh).
add_executable(bench_redis_limits ${CMAKE_CURRENT_SOURCE_DIR}/redis_limits.c)
target_include_directories(bench_redis_limits PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_redis_limits PRIVATE sluice_backend_redis sluice_limits)
