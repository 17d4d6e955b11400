#!/usr/bin/env bash
# Setup step: every npm package the tests and benchmarks drive, pinned in one lock
# (tests/package.json, tests/package-lock.json; installed in tests/node_modules, which
# tests/e2e, tests/harness, tests/dashboard and tests/node all resolve from): the official
# provider SDKs (@anthropic-ai/sdk, openai), the real agent harnesses run offline (Claude
# Code, the Claude Agent SDK, Codex CLI, the OpenAI Agents SDK, the Vercel AI SDK,
# LangChain JS; about 1.4 GB: three of them ship a native linux binary), playwright-core
# (drives Debian's chromium; never downloads a browser of its own) and the npm tokenizer
# the C tokenizer is compared with. `npm ci` when missing or stale (scripts/npm-ci.sh).
set -euo pipefail
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 20-node-tests.sh "$(cd "$(dirname "$0")/../../tests" && pwd)"
