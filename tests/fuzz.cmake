# Corpus replays of the fuzz targets outside the tokenizer (tokenizer.cmake has those):
# each in-tree corpus runs through its libFuzzer entry point under gcc (label fuzz).
pkg_check_modules(FUZZ_JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(FUZZ_LIBEVENT REQUIRED IMPORTED_TARGET libevent)

add_executable(fuzz_replay_timefmt ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                                   ${PROJECT_SOURCE_DIR}/fuzz/timefmt/fuzz_timefmt.c)
target_link_libraries(fuzz_replay_timefmt PRIVATE sluice_static)

add_executable(fuzz_replay_resync ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                                  ${PROJECT_SOURCE_DIR}/fuzz/resync/fuzz_resync.c)
target_link_libraries(fuzz_replay_resync PRIVATE sluice_static)

add_executable(fuzz_replay_usage ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                                 ${PROJECT_SOURCE_DIR}/fuzz/usage/fuzz_usage.c
                                 ${PROJECT_SOURCE_DIR}/src/server/proxy_usage.c)
target_include_directories(fuzz_replay_usage PRIVATE ${PROJECT_SOURCE_DIR}/src/server
                                                     ${PROJECT_SOURCE_DIR}/src/backend)
target_link_libraries(fuzz_replay_usage PRIVATE sluice_static PkgConfig::FUZZ_JANSSON
                                                PkgConfig::FUZZ_LIBEVENT)

add_executable(fuzz_replay_http ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                                ${PROJECT_SOURCE_DIR}/fuzz/http/fuzz_http.c)
target_link_libraries(fuzz_replay_http PRIVATE sluice_http_parse)

foreach(f timefmt resync usage http)
  add_test(NAME fuzz_replay_${f} COMMAND fuzz_replay_${f} ${PROJECT_SOURCE_DIR}/fuzz/${f}/corpus)
  set_tests_properties(fuzz_replay_${f} PROPERTIES LABELS "fuzz;unit")
endforeach()
