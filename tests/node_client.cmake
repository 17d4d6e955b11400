# The Node package clients/node: its node --test files against a real sluiced and sluice-emu on
# free ports (one test per file: node_client_<file>; node_client_conformance runs
# tests/clients/run_node.mjs on the package's own cases). The shared cases through the same
# runner are client_conformance_node, beside the other clients' in tests/clients.cmake.
# Needs node >= 20.
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
endif()
