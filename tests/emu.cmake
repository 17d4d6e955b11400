# sluice-emu tests: process-level tests (tests/integration/emu/test_*.py, Python 3
# standard library, label integration) starting the real emulator on 127.0.0.1:0, and
# the official SDKs against it (tests/e2e, node, label e2e; skipped when `make setup`
# has not installed tests/node_modules).
find_program(SL_PYTHON3 python3 REQUIRED)
sl_python_tests(emu emu TIMEOUT 180
                ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>" "SLUICE_CLI=$<TARGET_FILE:sluice>"
                            "PYTHONDONTWRITEBYTECODE=1")

find_program(SL_NODE node)
if(SL_NODE)
  add_test(NAME emu_e2e_sdks
           COMMAND ${SL_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/emu.test.mjs
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/e2e)
  set_tests_properties(emu_e2e_sdks PROPERTIES LABELS e2e TIMEOUT 180
                       ENVIRONMENT "SLUICE_EMU=$<TARGET_FILE:sluice-emu>")
endif()
