#!/usr/bin/env bash
# Setup step: the official provider SDKs (@anthropic-ai/sdk, openai) the end-to-end tests
# drive sluice-emu and sluiced with (tests/e2e/node_modules), installed from the pinned
# package-lock.json when missing or stale (scripts/npm-ci.sh).
set -euo pipefail
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 30-e2e-node.sh "$(cd "$(dirname "$0")/../../tests/e2e" && pwd)"
