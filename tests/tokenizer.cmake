# Tokenizer tests: unit tests (label unit), exactness against the npm package run with
# node (label exactness). The fuzz corpus replays are in fuzz/CMakeLists.txt.
foreach(t test_tokenizer test_estimate)
  sl_unit_test(${t} sluice_tokenizer)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src/tokenizer)
endforeach()

add_executable(tokenizer_gen_corpus ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer/gen_corpus.c
                                    ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer/corpus.c)
target_link_libraries(tokenizer_gen_corpus PRIVATE sluice_tokenizer) # for utf8proc

set(_exact ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer/exactness.sh)
# Two tests so the slow node runs (100,000 spaces: ~14 s in node) use both cores.
add_test(NAME tokenizer_exactness_corpus
         COMMAND ${_exact} $<TARGET_FILE:sluice> $<TARGET_FILE:tokenizer_gen_corpus>
                 ${CMAKE_CURRENT_SOURCE_DIR}/node
                 "^(prose|source|data|cjk|emoji|rtl|compat|all_code_points)")
add_test(NAME tokenizer_exactness_adversarial
         COMMAND ${_exact} $<TARGET_FILE:sluice> $<TARGET_FILE:tokenizer_gen_corpus>
                 ${CMAKE_CURRENT_SOURCE_DIR}/node
                 "^(spaces|word|invalid|nul|special)")
set_tests_properties(tokenizer_exactness_corpus tokenizer_exactness_adversarial
                     PROPERTIES LABELS exactness TIMEOUT 300)
