# Tokenizer tests: unit tests (label unit), exactness against the npm package run with
# node (label exactness), and fuzz corpus replays (label fuzz).
if(TARGET sluice_tokenizer)
  foreach(t test_tokenizer test_estimate)
    sl_unit_test(${t} sluice_tokenizer)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src/tokenizer)
  endforeach()

  add_executable(tokenizer_gen_corpus ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer/gen_corpus.c
                                      ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer/corpus.c)
  target_link_libraries(tokenizer_gen_corpus PRIVATE sluice_tokenizer) # for utf8proc

  if(TARGET sluice)
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
  endif()

  foreach(f tokenizer estimate)
    add_executable(fuzz_replay_${f} ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                                    ${PROJECT_SOURCE_DIR}/fuzz/${f}/fuzz_${f}.c)
    target_include_directories(fuzz_replay_${f} PRIVATE ${PROJECT_SOURCE_DIR}/src/tokenizer)
    target_link_libraries(fuzz_replay_${f} PRIVATE sluice_tokenizer)
    add_test(NAME fuzz_replay_${f} COMMAND fuzz_replay_${f} ${PROJECT_SOURCE_DIR}/fuzz/${f}/corpus)
    set_tests_properties(fuzz_replay_${f} PROPERTIES LABELS fuzz)
  endforeach()
endif()
