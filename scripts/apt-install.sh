#!/usr/bin/env bash
# Sourced by the setup scripts: sl_apt_install WHO PKG... installs the Debian packages among
# PKG that are missing (none missing: nothing runs), with sudo only when not root, refreshing
# the package lists first when they are older than a day.
sl_apt_install() {
  local who=$1
  shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "$who: installing ${missing[*]}"
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
    $sudo apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
