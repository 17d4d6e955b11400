# The real agent harnesses (tests/harness, node, label harness): Claude Code, the Claude
# Agent SDK, Codex CLI, the OpenAI Agents SDK, the Vercel AI SDK and LangChain JS, pinned
# in tests/package-lock.json (installed by `make setup`), each run offline against
# a recording stub and against sluice-emu, in a network namespace of their own with only
# loopback (offline.sh) and under strace, so that any connection beyond loopback fails
# the test. docs/harnesses.md says what each sends.
find_program(SL_NODE node)
find_program(SL_PYTHON3 python3 REQUIRED)
if(SL_NODE)
  foreach(name claude codex sdks)
    add_test(NAME harness_${name}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/offline.sh ${SL_NODE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/harness/${name}.test.mjs
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/harness)
    set_tests_properties(harness_${name} PROPERTIES LABELS harness TIMEOUT 240
                         ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>;PYTHON3=${SL_PYTHON3}")
  endforeach()
  # Every harness task above through a real sluiced proxying to sluice-emu (proxy.test.mjs).
  add_test(NAME proxy_test_harnesses
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/offline.sh ${SL_NODE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/harness/proxy.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/harness)
  set_tests_properties(proxy_test_harnesses PROPERTIES LABELS harness TIMEOUT 300
                       ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>;SLUICED=$<TARGET_FILE:sluiced>;PYTHON3=${SL_PYTHON3}")
  # Issue 24 item 1's regression test (resync.test.mjs): one default-model Claude Code
  # session through sluiced within 1.10x of the same session straight to sluice-emu,
  # interleaved in one run. About 40 s.
  add_test(NAME proxy_test_harness_resync
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/offline.sh ${SL_NODE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/harness/resync.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/harness)
  set_tests_properties(proxy_test_harness_resync PROPERTIES LABELS harness TIMEOUT 240
                       ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>;SLUICED=$<TARGET_FILE:sluiced>;PYTHON3=${SL_PYTHON3}")
  # README's "Put your fleet behind sluice": N processes on one prefix token, each naming
  # itself (Claude Code's ANTHROPIC_CUSTOM_HEADERS, Codex's env_http_headers).
  add_test(NAME proxy_test_harness_naming
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/offline.sh ${SL_NODE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/harness/naming.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/harness)
  set_tests_properties(proxy_test_harness_naming PROPERTIES LABELS harness TIMEOUT 240
                       ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>;SLUICED=$<TARGET_FILE:sluiced>;PYTHON3=${SL_PYTHON3}")
  # The fleet proof (fleet.test.mjs): ten Claude Code processes on one key, straight to
  # sluice-emu and then through sluiced. Minutes long: label slow, -DSL_SLOW_TESTS=ON.
  if(SL_SLOW_TESTS)
    add_test(NAME proxy_test_harness_fleet
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harness/offline.sh ${SL_NODE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/harness/fleet.test.mjs
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/harness)
    set_tests_properties(proxy_test_harness_fleet PROPERTIES LABELS "slow;harness" TIMEOUT 900
                         ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>;SLUICED=$<TARGET_FILE:sluiced>;PYTHON3=${SL_PYTHON3}")
  endif()
endif()
