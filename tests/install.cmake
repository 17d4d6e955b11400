# `make install` as a C library: stage it, then build programs with the staged pkg-config files.
add_test(NAME install_staged COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/install/run.sh
                                     ${PROJECT_BINARY_DIR})
set_tests_properties(install_staged PROPERTIES LABELS integration TIMEOUT 120)

# The README's `make run`: installs what is missing, builds, serves; the curl it prints works.
add_test(NAME make_run COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/install/make_run.sh
                               ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(make_run PROPERTIES LABELS integration TIMEOUT 120)

# sluice(1) lists every subcommand of src/cli/commands.def.
add_test(NAME man_lists_every_command COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/install/man_commands.sh
                                              ${PROJECT_SOURCE_DIR})
set_tests_properties(man_lists_every_command PROPERTIES LABELS unit)

# examples/sluice.yaml shows every top-level key the parser knows.
add_test(NAME example_config_has_every_key COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/install/example_keys.sh
                                                   ${PROJECT_SOURCE_DIR})
set_tests_properties(example_config_has_every_key PROPERTIES LABELS unit)
