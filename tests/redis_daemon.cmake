# Daemon-level Redis tests (tests/integration/redis_daemon/test_*.py, Python 3 standard
# library, label integration): real sluiced replicas on a private redis-server.
# redis-server comes from scripts/deps.sh: without it configuring fails, never skips.
find_program(SL_PYTHON3 python3 REQUIRED)
find_program(SL_REDIS_SERVER redis-server REQUIRED)
sl_python_tests(redis_daemon redis_daemon TIMEOUT 300 SERIAL
  ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE_EMU=$<TARGET_FILE:sluice-emu>;REDIS_SERVER=${SL_REDIS_SERVER};SLUICE_REDIS_LIBRARY=${SL_REDIS_LIBRARY};PYTHONDONTWRITEBYTECODE=1")

# Fault scenarios judged by sluice-emu (tests/integration/redis_daemon/fault_emu.py): about
# 35 s each, so registered only with -DSL_SLOW_TESTS=ON, label `slow` (ctest -L slow).
if(SL_SLOW_TESTS)
  add_test(NAME redis_faults_emu
           COMMAND ${SL_PYTHON3} -m unittest -v fault_emu
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/integration/redis_daemon)
  set_tests_properties(redis_faults_emu PROPERTIES
    LABELS slow
    TIMEOUT 600
    RUN_SERIAL TRUE
    ENVIRONMENT "SLUICED=$<TARGET_FILE:sluiced>;SLUICE_EMU=$<TARGET_FILE:sluice-emu>;REDIS_SERVER=${SL_REDIS_SERVER};PYTHONDONTWRITEBYTECODE=1")
endif()
