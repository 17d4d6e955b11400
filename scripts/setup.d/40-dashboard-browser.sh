#!/usr/bin/env bash
# Setup step: the browser the dashboard's browser tests (server_test_dashboard*) drive:
# Debian's `chromium` (/usr/lib/chromium is about 350 MB, so here for the tests rather than
# in deps.sh's build packages); playwright-core comes with the tests' npm packages
# (20-node-tests.sh).
set -euo pipefail
. "$(dirname "$0")/../apt-install.sh"
sl_apt_install 40-dashboard-browser.sh chromium
