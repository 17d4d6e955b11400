#!/usr/bin/env bash
# Setup step: Debian's packaging tools for `make deb` and its test (package_deb):
# debhelper (dh, dh_installsystemd; it brings dpkg-dev's dpkg-buildpackage) and
# fakeroot, only when missing. systemd-analyze (the unit's check) comes with systemd.
set -euo pipefail
PKGS=(debhelper fakeroot dpkg-dev systemd)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "60-deb-tools.sh: installing ${missing[*]}"
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
  $SUDO apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
