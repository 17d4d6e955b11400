#!/usr/bin/env bash
# Setup step: the real agent harnesses the harness tests run offline (tests/harness:
# Claude Code, the Claude Agent SDK, Codex CLI, the OpenAI Agents SDK, the Vercel AI SDK,
# LangChain JS), installed from the pinned package-lock.json when missing or stale (scripts/npm-ci.sh). About 1.4 GB:
# Claude Code, the Agent SDK and Codex each ship a native linux binary inside the package.
set -euo pipefail
. "$(dirname "$0")/../npm-ci.sh"
sl_npm_ci 50-harness-node.sh "$(cd "$(dirname "$0")/../../tests/harness" && pwd)"
