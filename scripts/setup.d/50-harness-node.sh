#!/usr/bin/env bash
# Setup step: the real agent harnesses the harness tests run offline (tests/harness:
# Claude Code, the Claude Agent SDK, Codex CLI, the OpenAI Agents SDK, the Vercel AI SDK,
# LangChain JS), installed from the pinned package-lock.json when missing. About 1.4 GB:
# Claude Code, the Agent SDK and Codex each ship a native linux binary inside the package.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../../tests/harness" && pwd)"
nm="$dir/node_modules"
[ -x "$nm/.bin/claude" ] && [ -x "$nm/.bin/codex" ] && [ -d "$nm/@anthropic-ai/claude-agent-sdk" ] &&
  [ -d "$nm/@openai/agents" ] && [ -d "$nm/ai" ] && [ -d "$nm/@langchain/openai" ] && exit 0
command -v npm >/dev/null || { echo "50-harness-node.sh: npm is required" >&2; exit 1; }
echo "50-harness-node.sh: npm ci in $dir"
(cd "$dir" && npm ci --silent --no-audit --no-fund)
