#!/usr/bin/env bash
# Setup step: Debian's packaging tools for `make deb` and its test (package_deb):
# debhelper (dh, dh_installsystemd), dpkg-dev (dpkg-buildpackage), fakeroot, and systemd
# (systemd-analyze checks the unit), only when missing.
set -euo pipefail
. "$(dirname "$0")/../apt-install.sh"
sl_apt_install 60-deb-tools.sh debhelper fakeroot dpkg-dev systemd
