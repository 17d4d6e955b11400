# `make install` as a C library: stage it, then build programs with the staged pkg-config files.
add_test(NAME install_staged COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/install/run.sh
                                     ${PROJECT_BINARY_DIR})
set_tests_properties(install_staged PROPERTIES LABELS integration TIMEOUT 120)
