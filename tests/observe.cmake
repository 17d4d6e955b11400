# Observing a fleet (issue 17, docs/observe.md): `sluice overlay`, the Prometheus rules
# (promtool, from Debian's prometheus package in scripts/deps.sh) and the Grafana
# dashboard checked against a real sluiced's /metrics.
find_program(SL_PROMTOOL promtool REQUIRED)
add_test(NAME overlay_cli COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/overlay/run.sh
                                  $<TARGET_FILE:sluice> ${PROJECT_SOURCE_DIR})
set_tests_properties(overlay_cli PROPERTIES LABELS integration TIMEOUT 120)
add_test(NAME observe_rules_check
         COMMAND ${SL_PROMTOOL} check rules ${PROJECT_SOURCE_DIR}/monitoring/prometheus/sluice.rules.yml)
add_test(NAME observe_rules_test
         COMMAND ${SL_PROMTOOL} test rules sluice.rules.test.yml
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/monitoring/prometheus)
set_tests_properties(observe_rules_check observe_rules_test PROPERTIES LABELS unit)
sl_python_tests(server observe TIMEOUT 180
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE=$<TARGET_FILE:sluice>;PYTHONDONTWRITEBYTECODE=1")
