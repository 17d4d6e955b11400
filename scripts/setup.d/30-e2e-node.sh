#!/usr/bin/env bash
# Setup step: the official provider SDKs (@anthropic-ai/sdk, openai) the end-to-end tests
# drive sluice-emu and sluiced with (tests/e2e/node_modules), installed from the pinned
# package-lock.json when missing.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../../tests/e2e" && pwd)"
[ -d "$dir/node_modules/@anthropic-ai/sdk" ] && [ -d "$dir/node_modules/openai" ] && exit 0
command -v npm >/dev/null || { echo "30-e2e-node.sh: npm is required" >&2; exit 1; }
echo "30-e2e-node.sh: npm ci in $dir"
(cd "$dir" && npm ci --silent --no-audit --no-fund)
