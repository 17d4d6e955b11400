# Action limits (issue 16): unit tests of src/limits and the shared conformance scenarios
# (tests/conformance/limits/*.scn), run here on the C library; the Redis port will run
# the same files. sluice_static gives the tests sl_strerror().
foreach(t test_limits_algorithms test_limits_set test_limits_adaptive test_limits_config)
  sl_unit_test(${t} sluice_limits sluice_static)
endforeach()
