# bench_tokenizer: sluice vs the npm package on the generated corpus (prints figures).
add_executable(bench_tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer.c
                               ${PROJECT_SOURCE_DIR}/tests/integration/tokenizer/corpus.c)
target_include_directories(bench_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/tests/integration/tokenizer)
target_compile_definitions(bench_tokenizer PRIVATE
  SL_NODE_DIR="${PROJECT_SOURCE_DIR}/tests/node")
target_link_libraries(bench_tokenizer PRIVATE sluice_tokenizer)
