#!/usr/bin/env bash
# Builds the Debian packages of debian/ with dpkg-buildpackage (debhelper, CMake) in a copy
# of the source tree (tracked files as they are in the work tree, plus the vocabulary
# fetched at setup into data/, which is never committed), so no build artefact of the
# work tree leaks in and the .deb files land in one place.
# usage: deb.sh [OUT_DIR]   (default: build-deb; prints the .deb paths)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-$root/build-deb}" && cd "${1:-$root/build-deb}" && pwd)"
vocab="$root/data/claude.json"
[ -s "$vocab" ] || { echo "deb.sh: $vocab is missing (make setup-run fetches it)" >&2; exit 1; }

version="$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)"
work="$out/src"
tree="$work/sluice-$version"
rm -rf "$work"
mkdir -p "$tree/data"
# Tracked and new (not ignored) files, skipping any deleted in the work tree.
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
   while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
   tar --null -T - -cf -) | tar -xf - -C "$tree"
cp "$vocab" "$tree/data/claude.json"

jobs="$(nproc 2>/dev/null || echo 2)"
(cd "$tree" && DEB_BUILD_OPTIONS="nocheck parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
   dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1 \
  || { tail -n 60 "$work/build.log" >&2; echo "deb.sh: dpkg-buildpackage failed; log: $work/build.log" >&2; exit 1; }
rm -f "$out"/*.deb "$out"/*.ddeb "$out"/*.changes "$out"/*.buildinfo
mv "$work"/*.deb "$out"/
mv "$work"/*.ddeb "$work"/*.changes "$work"/*.buildinfo "$out"/ 2>/dev/null || true
ls "$out"/*.deb
