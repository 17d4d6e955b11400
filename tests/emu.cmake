# sluice-emu tests: process-level tests (tests/integration/emu/test_*.py, Python 3
# standard library, label integration) starting the real emulator on 127.0.0.1:0, and
# the official SDKs against it (tests/e2e, node, label e2e; skipped when `make setup`
# has not installed tests/node_modules).
find_program(SL_PYTHON3 python3 REQUIRED)
set(_emu_env "SLUICE_EMU=$<TARGET_FILE:sluice-emu>" "SLUICE_CLI=$<TARGET_FILE:sluice>"
             "PYTHONDONTWRITEBYTECODE=1")
file(GLOB SL_EMU_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/integration/emu/test_*.py)
foreach(t ${SL_EMU_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME emu_${name}
           COMMAND ${SL_PYTHON3} -m unittest -v ${name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/integration/emu)
  set_tests_properties(emu_${name} PROPERTIES LABELS integration TIMEOUT 180
                       ENVIRONMENT "${_emu_env}")
endforeach()

find_program(SL_NODE node)
if(SL_NODE)
  add_test(NAME emu_e2e_sdks
           COMMAND ${SL_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/emu.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/e2e)
  set_tests_properties(emu_e2e_sdks PROPERTIES LABELS e2e TIMEOUT 180
                       ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>")
endif()
