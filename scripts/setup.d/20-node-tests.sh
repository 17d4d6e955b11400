#!/usr/bin/env bash
# Setup step: the pinned npm tokenizer the exactness test and the benchmark compare
# against (tests/node/node_modules), installed from package-lock.json when missing.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../../tests/node" && pwd)"
[ -d "$dir/node_modules/@anthropic-ai/tokenizer" ] && exit 0
command -v npm >/dev/null || { echo "20-node-tests.sh: npm is required" >&2; exit 1; }
echo "20-node-tests.sh: npm ci in $dir"
(cd "$dir" && npm ci --silent --no-audit --no-fund)
