# bench_limits: action-limit checks per second per algorithm and as a hierarchy (src/limits).
add_executable(bench_limits ${CMAKE_CURRENT_SOURCE_DIR}/limits.c)
target_include_directories(bench_limits PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench_limits PRIVATE sluice_limits)
