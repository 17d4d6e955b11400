# The Debian packages (label package): `make deb`'s build, `dpkg -i` on this machine (root),
# `systemd-analyze verify` and the installed sluiced run with the unit's command line, then
# a purge; package_systemd boots the unit under systemd in a container. Registered only with -DSL_PACKAGE_TESTS=ON, since it installs system packages:
# .ci/run turns it on (about a minute on 2 cores); `ctest -L package` runs it.
option(SL_PACKAGE_TESTS "register the Debian package test (installs and purges packages; needs root)" OFF)
if(SL_PACKAGE_TESTS)
  add_test(NAME package_deb COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/package/deb.sh
                                    ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/package-deb)
  set_tests_properties(package_deb PROPERTIES LABELS package TIMEOUT 600 RUN_SERIAL TRUE)
  # The unit under a real systemd (PID 1 of a systemd-nspawn container), with the .deb
  # files package_deb leaves behind (built again when absent).
  add_test(NAME package_systemd COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/package/systemd.sh
                                        ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/package-deb)
  set_tests_properties(package_systemd PROPERTIES LABELS package TIMEOUT 900 RUN_SERIAL TRUE
                                                  DEPENDS package_deb)
endif()
