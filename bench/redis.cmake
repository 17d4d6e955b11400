# bench_redis: lease-then-settle round trips through the redis backend (one and two replicas on
# one Redis) against the memory backend; bench/redis.sh adds redis-benchmark FCALL figures.
add_executable(bench_redis ${CMAKE_CURRENT_SOURCE_DIR}/redis.c)
target_link_libraries(bench_redis PRIVATE sluice_backend_redis)
