#!/usr/bin/env bash
# Setup step: the pinned npm tokenizer the exactness test and the benchmark compare
# against (tests/node/node_modules), installed from package-lock.json when missing or stale (scripts/npm-ci.sh).
set -euo pipefail
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 20-node-tests.sh "$(cd "$(dirname "$0")/../../tests/node" && pwd)"
