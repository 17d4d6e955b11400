# Proxy tests: process-level tests of sluiced's provider proxy against the real
# sluice-emu (tests/integration/proxy/test_*.py, Python 3 standard library, label
# integration), and the official SDKs through the proxy (tests/e2e/proxy_*.test.mjs, node,
# label e2e; skipped when tests/node_modules is not installed).
find_program(SL_PYTHON3 python3 REQUIRED)
set(_proxy_env "SLUICED=$<TARGET_FILE:sluiced>" "SLUICE_EMU=$<TARGET_FILE:sluice-emu>"
               "PYTHONDONTWRITEBYTECODE=1")
sl_python_tests(proxy proxy TIMEOUT 300 ENVIRONMENT ${_proxy_env})

find_program(SL_NODE node)
if(SL_NODE)
  file(GLOB SL_PROXY_E2E CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/e2e/proxy_*.test.mjs)
  foreach(t ${SL_PROXY_E2E})
    get_filename_component(name ${t} NAME_WE)
    add_test(NAME e2e_${name} COMMAND ${SL_NODE} ${t}
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/e2e)
    set_tests_properties(e2e_${name} PROPERTIES LABELS e2e TIMEOUT 600
                         ENVIRONMENT "${_proxy_env}")
  endforeach()
endif()

# The long variant of the kill -9 fault test: 75 s per variant, two kills, whole 60 s
# windows. Label `slow`, built only with -DSL_SLOW_TESTS=ON (the short one is in the
# default suite as proxy_test_restart_faults).
if(SL_SLOW_TESTS)
  add_test(NAME proxy_test_restart_faults_long
           COMMAND ${SL_PYTHON3} -m unittest -v test_restart_faults
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/integration/proxy)
  set_tests_properties(proxy_test_restart_faults_long PROPERTIES LABELS slow TIMEOUT 900
                       ENVIRONMENT "${_proxy_env};SLUICE_FAULT_SECONDS=75")
endif()
# The Responses usage, its stream pass-through and the path table (units of sluiced_core).
sl_unit_test(test_proxy_responses sluiced_core)
sl_unit_test(test_proxy_usage sluiced_core)
# The output a proxied call holds, its cap, and the continued answer's pieces.
sl_unit_test(test_proxy_output sluiced_core)
sl_unit_test(test_proxy_continue_openai sluiced_core)
# A call started from inside another's header callback (a resync granting a queued call).
sl_unit_test(test_upstream_reentry sluiced_core)
# The batch APIs' routes, queue count and results usage, and the embeddings count.
sl_unit_test(test_proxy_batches sluiced_core)
