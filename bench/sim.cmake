# bench_sim: wall time of `sluice sim` on scale-200 for two simulated hours, all strategies.
add_executable(bench_sim ${CMAKE_CURRENT_SOURCE_DIR}/sim.c)
target_compile_definitions(bench_sim PRIVATE SL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
target_link_libraries(bench_sim PRIVATE sluice_sim)
