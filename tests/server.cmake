# Process-level tests of sluiced (tests/integration/server/*.py): Python 3 standard library
# only; each starts the real daemon on a free 127.0.0.1 port.
# python3 and prometheus come from scripts/deps.sh; a missing one fails the tests.
find_program(SL_PYTHON3 python3 REQUIRED)
sl_python_tests(server server TIMEOUT 180
                ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE=$<TARGET_FILE:sluice>;PYTHONDONTWRITEBYTECODE=1")

# The transport's HTTP/1.1 parser, on its own.
sl_unit_test(test_http_parse sluice_http_parse)

# Loopback from the address, the hot answers' number writing, and the fleet watch's helpers
# (name map, sliding window, top-N series): units of sluiced_core.
sl_unit_test(test_netaddr sluiced_core)
sl_unit_test(test_jsonfmt sluiced_core)
sl_unit_test(test_log sluiced_core)
sl_unit_test(test_fleet_helpers sluiced_core)
# The core calls no function of a feature's: only the feature table's entries link them.
add_test(NAME architecture_links
         COMMAND ${SL_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/architecture/check_links.py
                 $<TARGET_OBJECTS:sluiced_core>
         COMMAND_EXPAND_LISTS)
set_tests_properties(architecture_links PROPERTIES LABELS unit)
# Every key of the config field tables documented (docs/server.md) and in the example.
sl_unit_test(test_config_keys sluiced_core)
target_compile_definitions(test_config_keys PRIVATE SL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The core's sections and the features' keys as field tables: good values and bad ones.
sl_unit_test(test_config_sections sluiced_core)
# Agent tokens by SHA-256: the index, the bounds' field table, tiers (core/tokens.c).
sl_unit_test(test_tokens sluiced_core)
# The one error->HTTP table (errors.def), in the lease API's and the provider's dialect.
sl_unit_test(test_error_table sluiced_core)
# The built-in list prices (usage/prices.def).
sl_unit_test(test_prices sluiced_core)
# The feature table (core/features.def) and the event bus.
sl_unit_test(test_feature_table sluiced_core)
