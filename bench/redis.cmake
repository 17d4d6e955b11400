# bench_redis: lease-then-settle round trips through the redis backend (one and two replicas on
# one Redis) against the memory backend; bench/redis.sh adds redis-benchmark FCALL figures and
# bench_redis_queue's cost per call by queue depth.
add_executable(bench_redis ${CMAKE_CURRENT_SOURCE_DIR}/redis.c)
target_link_libraries(bench_redis PRIVATE sluice_backend_redis)
# bench_redis_queue: Redis CPU per call of the library at 0, 1,000 and 10,000 queued.
add_executable(bench_redis_queue ${CMAKE_CURRENT_SOURCE_DIR}/redis_queue.c)
target_link_libraries(bench_redis_queue PRIVATE sluice_backend_redis)
