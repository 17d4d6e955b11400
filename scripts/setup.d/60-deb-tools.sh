#!/usr/bin/env bash
# Setup step: Debian's packaging tools for `make deb` and its test (package_deb):
# debhelper (dh, dh_installsystemd), dpkg-dev (dpkg-buildpackage), fakeroot, and systemd
# (systemd-analyze checks the unit), systemd-container and debootstrap (package_systemd boots
# the unit under systemd in a systemd-nspawn container of a minimal Debian 12), only when
# missing.
set -euo pipefail
. "$(dirname "$0")/../apt-install.sh"
sl_apt_install 60-deb-tools.sh debhelper fakeroot dpkg-dev systemd systemd-container debootstrap
