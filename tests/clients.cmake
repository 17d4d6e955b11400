# The shared client conformance suite (tests/clients/README.md): one case file, a runner per
# client (C, Python, Node), each run by driver.py against a real sluiced on a free 127.0.0.1 port.
find_program(SL_PYTHON3 python3 REQUIRED)
add_executable(client_conformance_run_c ${CMAKE_CURRENT_SOURCE_DIR}/clients/run_c.c)
target_link_libraries(client_conformance_run_c PRIVATE sluice_client_static)

set(_sl_conformance_driver ${SL_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/clients/driver.py
    --sluiced $<TARGET_FILE:sluiced>)
add_test(NAME client_conformance_c
         COMMAND ${_sl_conformance_driver} $<TARGET_FILE:client_conformance_run_c>)
add_test(NAME client_conformance_python
         COMMAND ${_sl_conformance_driver} ${SL_PYTHON3}
                 ${CMAKE_CURRENT_SOURCE_DIR}/clients/run_python.py)
set_tests_properties(client_conformance_c client_conformance_python PROPERTIES
  LABELS integration TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
find_program(SL_NODE node)
if(SL_NODE)
  add_test(NAME client_conformance_node
           COMMAND ${_sl_conformance_driver} ${SL_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/clients/run_node.mjs)
  set_tests_properties(client_conformance_node PROPERTIES LABELS integration TIMEOUT 300)
endif()
