# The Python package clients/python (standard library only): its unittest suite against a
# real sluiced on a free port (and sluice-emu for the agent of examples/agent_sdk.py), and an
# offline pip install into a fresh venv.
find_program(SL_PYTHON3 python3 REQUIRED)
add_test(NAME python_client
         COMMAND ${SL_PYTHON3} -m unittest discover -v -s ${PROJECT_SOURCE_DIR}/clients/python/tests
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/clients/python)
set_tests_properties(python_client PROPERTIES
  LABELS integration
  TIMEOUT 300
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE_EMU=$<TARGET_FILE:sluice-emu>;PYTHONDONTWRITEBYTECODE=1")
