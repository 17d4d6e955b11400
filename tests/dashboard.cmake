# The dashboard in a real browser (tests/dashboard, label integration): Debian's headless
# Chromium driven by playwright-core, both installed by `make setup`
# (scripts/setup.d/40-dashboard-browser.sh). The screenshots go to the build directory;
# the test prints their paths.
# Without node the build still configures (`make` installs nothing) and the test fails
# saying what is missing.
find_program(SL_NODE_DASHBOARD node)
if(SL_NODE_DASHBOARD)
  add_test(NAME server_test_dashboard
           COMMAND ${SL_NODE_DASHBOARD} --test ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/dashboard.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/dashboard)
else()
  add_test(NAME server_test_dashboard
           COMMAND ${CMAKE_COMMAND} -E echo "server_test_dashboard: node is not installed (make setup)")
  set_tests_properties(server_test_dashboard PROPERTIES WILL_FAIL TRUE)
endif()
set_tests_properties(server_test_dashboard PROPERTIES
  LABELS integration
  TIMEOUT 180
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;DASHBOARD_OUT=${CMAKE_BINARY_DIR}/tests/dashboard")

# The dashboard opened during an incident (incident.test.mjs): the last hour at first
# paint, a plain headless chromium --screenshot / --dump-dom with data, the binding bucket,
# folded events, the layout at 1024, 1440 and 2560 px. Screenshots in the build directory.
if(SL_NODE_DASHBOARD)
  add_test(NAME server_test_dashboard_incident
           COMMAND ${SL_NODE_DASHBOARD} --test ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/incident.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/dashboard)
  set_tests_properties(server_test_dashboard_incident PROPERTIES
    LABELS integration
    TIMEOUT 240
    ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;DASHBOARD_OUT=${CMAKE_BINARY_DIR}/tests/dashboard")
endif()

# `make demo`'s script: the URL it prints answers, the fleet shows, Ctrl-C stops it all.
add_test(NAME demo_smoke COMMAND ${SL_PYTHON3} -m unittest -v test_demo
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/integration/demo)
set_tests_properties(demo_smoke PROPERTIES
  LABELS integration
  TIMEOUT 120
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE_EMU=$<TARGET_FILE:sluice-emu>;PYTHONDONTWRITEBYTECODE=1")
