# The Node package clients/node: its node --test files against a real sluiced and sluice-emu on
# free ports (one test per file: node_client_<file>), and the shared client conformance cases
# through tests/clients/run_node.mjs once tests/clients/cases.json exists. Needs node >= 20.
find_program(SL_NODE node)
if(SL_NODE)
  set(_node_client_env "SLUICED=$<TARGET_FILE:sluiced>" "SLUICE_EMU=$<TARGET_FILE:sluice-emu>")
  file(GLOB SL_NODE_CLIENT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/clients/node/test/*.test.mjs)
  foreach(t ${SL_NODE_CLIENT_TESTS})
    get_filename_component(name ${t} NAME_WE)
    add_test(NAME node_client_${name} COMMAND ${SL_NODE} --test ${t}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/clients/node)
    set_tests_properties(node_client_${name} PROPERTIES LABELS integration TIMEOUT 300
                         ENVIRONMENT "${_node_client_env}")
  endforeach()
  if(EXISTS ${PROJECT_SOURCE_DIR}/tests/clients/cases.json)
    add_test(NAME client_conformance_node
             COMMAND ${SL_NODE} --test ${PROJECT_SOURCE_DIR}/clients/node/test/conformance.test.mjs
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/clients/node)
    set_tests_properties(client_conformance_node PROPERTIES LABELS integration TIMEOUT 300
                         ENVIRONMENT "${_node_client_env};SLUICE_CASES=tests/clients/cases.json")
  endif()
endif()
