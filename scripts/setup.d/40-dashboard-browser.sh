#!/usr/bin/env bash
# Setup step: what the dashboard's browser test (server_test_dashboard) drives: Debian's
# `chromium` (/usr/lib/chromium is about 350 MB, so here for the tests rather than in deps.sh's build
# packages) and the pinned `playwright-core` (tests/dashboard/node_modules, from
# package-lock.json with npm ci; it never downloads a browser of its own).
set -euo pipefail
. "$(dirname "$0")/../apt-install.sh"
sl_apt_install 40-dashboard-browser.sh chromium
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 40-dashboard-browser.sh "$(cd "$(dirname "$0")/../../tests/dashboard" && pwd)"
