#!/usr/bin/env bash
# Fetches the Claude vocabulary (claude.json of the npm package @anthropic-ai/tokenizer,
# Apache-2.0) into data/, which is never committed. Idempotent: does nothing when the
# file is already there. The tarball is checked against a pinned SHA-256.
set -euo pipefail

PACKAGE="@anthropic-ai/tokenizer"
VERSION="0.0.4"
TARBALL_SHA256="197ba0ae81d3abb68de9ed0bd5d4c474db866a98cc70a830c8559420ea59768f"

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/data/claude.json"
[ -s "$dest" ] && exit 0

command -v npm >/dev/null || { echo "fetch-vocab.sh: npm is required to fetch $PACKAGE" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-vocab.sh: fetching $PACKAGE@$VERSION"
(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tarball="$(ls "$tmp"/*.tgz)"
actual="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [ "$actual" != "$TARBALL_SHA256" ]; then
  echo "fetch-vocab.sh: $tarball: SHA-256 $actual, expected $TARBALL_SHA256" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp" package/claude.json
mkdir -p "$root/data"
mv "$tmp/package/claude.json" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "fetch-vocab.sh: wrote $dest"
