# libsluice-client and the sluice command: unit tests (label unit) and process-level
# tests against a real sluiced on a free 127.0.0.1 port (label integration).
foreach(t test_client_backoff test_client_checkpoint test_client_local test_client_errors)
  sl_unit_test(${t} sluice_client_static)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src/client)
endforeach()

# A small fleet of client threads for the fail-open test (tests/integration/client).
add_executable(client_fleet ${CMAKE_CURRENT_SOURCE_DIR}/integration/client/fleet.c)
target_link_libraries(client_fleet PRIVATE sluice_client_static)
target_include_directories(client_fleet PRIVATE ${PROJECT_SOURCE_DIR}/include)

find_program(SL_PYTHON3 python3 REQUIRED)
sl_python_tests(client client TIMEOUT 240
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE=$<TARGET_FILE:sluice>;CLIENT_FLEET=$<TARGET_FILE:client_fleet>;AGENT_LOOP=$<TARGET_FILE:agent_loop>;SLUICE_CLIENT_LIB=$<TARGET_FILE:sluice_client_static>;SLUICE_SOURCE_DIR=${PROJECT_SOURCE_DIR};PYTHONDONTWRITEBYTECODE=1")
