# Process-level tests of sluiced (tests/integration/server/*.py): Python 3 standard library
# only; each starts the real daemon on a free 127.0.0.1 port.
# python3 and prometheus come from scripts/deps.sh; a missing one fails the tests.
find_program(SL_PYTHON3 python3 REQUIRED)
file(GLOB SL_SERVER_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/integration/server/test_*.py)
foreach(t ${SL_SERVER_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME server_${name}
           COMMAND ${SL_PYTHON3} -m unittest -v ${name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/integration/server)
  set_tests_properties(server_${name} PROPERTIES
    LABELS integration
    TIMEOUT 180
    ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE=$<TARGET_FILE:sluice>;PYTHONDONTWRITEBYTECODE=1")
endforeach()

# The transport's HTTP/1.1 parser, on its own.
sl_unit_test(test_http_parse sluice_http_parse)

# Loopback from the address, compiled on its own.
add_executable(test_netaddr ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_netaddr.c
                            ${PROJECT_SOURCE_DIR}/src/server/netaddr.c)
target_include_directories(test_netaddr PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_netaddr PRIVATE PkgConfig::CMOCKA)
add_test(NAME test_netaddr COMMAND test_netaddr)
set_tests_properties(test_netaddr PROPERTIES LABELS unit)

# The hot answers' number writing, compiled on its own.
pkg_check_modules(SRV_JANSSON REQUIRED IMPORTED_TARGET jansson)
add_executable(test_jsonfmt ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jsonfmt.c
                            ${PROJECT_SOURCE_DIR}/src/server/jsonfmt.c)
target_include_directories(test_jsonfmt PRIVATE ${PROJECT_SOURCE_DIR}/src/server
                                                ${PROJECT_SOURCE_DIR}/src/backend
                                                ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_jsonfmt PRIVATE PkgConfig::CMOCKA PkgConfig::SRV_JANSSON m)
add_test(NAME test_jsonfmt COMMAND test_jsonfmt)
set_tests_properties(test_jsonfmt PROPERTIES LABELS unit)

# The fleet watch's helpers (name map, sliding window, top-N series), compiled on their own.
pkg_check_modules(SRV_LIBEVENT REQUIRED IMPORTED_TARGET libevent)
add_executable(test_fleet_helpers ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_fleet_helpers.c
                                  ${PROJECT_SOURCE_DIR}/src/server/namemap.c
                                  ${PROJECT_SOURCE_DIR}/src/server/slidewin.c
                                  ${PROJECT_SOURCE_DIR}/src/server/agent_series.c)
target_include_directories(test_fleet_helpers PRIVATE ${PROJECT_SOURCE_DIR}/src/server
                                                      ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_fleet_helpers PRIVATE PkgConfig::CMOCKA PkgConfig::SRV_JANSSON
                                                 PkgConfig::SRV_LIBEVENT m)
add_test(NAME test_fleet_helpers COMMAND test_fleet_helpers)
set_tests_properties(test_fleet_helpers PROPERTIES LABELS unit)
