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

# The lease API's JSON handlers through sluiced's own front, on a memory backend; the
# transport and the proxy are stood in for by the target itself.
pkg_check_modules(FUZZ_YAML REQUIRED IMPORTED_TARGET yaml-0.1)
set(SL_SERVER_DIR ${PROJECT_SOURCE_DIR}/src/server)
add_executable(fuzz_replay_api ${PROJECT_SOURCE_DIR}/fuzz/replay.c
                               ${PROJECT_SOURCE_DIR}/fuzz/api/fuzz_api.c
                               ${SL_SERVER_DIR}/http.c ${SL_SERVER_DIR}/leases.c
                               ${SL_SERVER_DIR}/report_bounds.c ${SL_SERVER_DIR}/state.c
                               ${SL_SERVER_DIR}/events.c ${SL_SERVER_DIR}/json_in.c
                               ${SL_SERVER_DIR}/jsonfmt.c ${SL_SERVER_DIR}/config.c
                               ${SL_SERVER_DIR}/metrics.c ${SL_SERVER_DIR}/idmap.c)
target_include_directories(fuzz_replay_api PRIVATE ${SL_SERVER_DIR} ${PROJECT_SOURCE_DIR}/src/backend)
target_link_libraries(fuzz_replay_api PRIVATE sluice_backend PkgConfig::FUZZ_JANSSON
                                              PkgConfig::FUZZ_LIBEVENT PkgConfig::FUZZ_YAML m)

foreach(f timefmt resync usage http api)
  add_test(NAME fuzz_replay_${f} COMMAND fuzz_replay_${f} ${PROJECT_SOURCE_DIR}/fuzz/${f}/corpus)
  set_tests_properties(fuzz_replay_${f} PROPERTIES LABELS "fuzz;unit")
endforeach()
