#!/usr/bin/env bash
# Setup step: what the dashboard's browser test (server_test_dashboard) drives: Debian's
# `chromium` (/usr/lib/chromium is about 350 MB, so here for the tests rather than in deps.sh's build
# packages) and the pinned `playwright-core` (tests/dashboard/node_modules, from
# package-lock.json with npm ci; it never downloads a browser of its own).
set -euo pipefail
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q 'install ok installed'; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "40-dashboard-browser.sh: installing chromium"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
    $SUDO apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
fi
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 40-dashboard-browser.sh "$(cd "$(dirname "$0")/../../tests/dashboard" && pwd)"
