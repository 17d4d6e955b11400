#!/usr/bin/env bash
# demo.sh - a small fleet to watch: sluice-emu (a provider whose limits others also use),
# sluiced proxying one pool to it, and a few agent loops calling through the proxy with
# curl. Prints the dashboard's URL; Ctrl-C (or DEMO_SECONDS running out) stops everything.
#
# usage: scripts/demo.sh [BUILD_DIR]
# env:   DEMO_LISTEN (default 127.0.0.1:8750; port 0 = any free port), DEMO_AGENTS (6),
#        DEMO_SECONDS (0 = until Ctrl-C), SLUICED and SLUICE_EMU (default: the build's)
set -euo pipefail
BUILD="${1:-build}"
SLUICED="${SLUICED:-$BUILD/src/server/sluiced}"
EMU="${SLUICE_EMU:-$BUILD/src/emu/sluice-emu}"
LISTEN="${DEMO_LISTEN:-127.0.0.1:8750}"
AGENTS="${DEMO_AGENTS:-6}"
SECONDS_TO_RUN="${DEMO_SECONDS:-0}"
KEY="sk-demo-pool-key"
for b in "$SLUICED" "$EMU"; do
  [ -x "$b" ] || { echo "demo.sh: $b is not built (make build)" >&2; exit 1; }
done

tmp="$(mktemp -d -t sluice-demo-XXXXXX)"
pids=()
stop() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "sluice demo: stopped"
  rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 0' INT TERM

# Starts "$@" with its output in $tmp/$name.out and waits for its "listening on" line;
# sets started_url to the URL it gives. (Not in a $(...) subshell: pids must see it.)
start() {
  local name="$1"; shift
  "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 100); do
    started_url="$(grep -so 'listening on http://[0-9.:]*' "$tmp/$name.out" | head -n 1 | cut -d' ' -f3 || true)"
    [ -n "$started_url" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo.sh: $name did not start: $(cat "$tmp/$name.err")" >&2
  return 1
}

# The provider: 120,000 input and 24,000 output tokens a minute, a quarter of them used
# by traffic sluice does not see, so some calls come back 429 and the margin adapts.
start emu "$EMU" --listen 127.0.0.1:0 --api-key "$KEY" --input-tpm 120000 \
  --output-tpm 24000 --rpm 120 --outside-share 0.25 --ttft-ms 300 --tokens-per-s 200 \
  --output-tokens 150
emu_url="$started_url"
cat > "$tmp/sluice.yaml" <<YAML
pools:
  default:
    input_tpm: 120000
    output_tpm: 24000
    rpm: 120
    max_queue_wait_s: 120
    upstream_url: $emu_url
    provider: anthropic
    api_key_env: SLUICE_DEMO_KEY
YAML
export SLUICE_DEMO_KEY="$KEY"
start sluiced "$SLUICED" --config "$tmp/sluice.yaml" --listen "$LISTEN"
url="$started_url"

# The fleet: one planner with big prompts, the rest workers, each a loop of calls with a
# pause (the agent's "tool time") between them.
agent() {
  local name="$1" role="$2" words="$3" pause="$4"
  local prompt
  prompt="$(printf 'read the diff and the failing test, then plan the fix. %.0s' $(seq "$words"))"
  while true; do
    curl -s -o /dev/null --max-time 120 -X POST "$url/anthropic/v1/messages" \
      -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' \
      -H "x-api-key: demo" -H "x-sluice-agent: $name" -H "x-sluice-role: $role" \
      -d "{\"model\":\"claude-demo\",\"max_tokens\":300,\"messages\":[{\"role\":\"user\",\"content\":\"$prompt\"}]}" || true
    sleep "$pause"
  done
}
agent planner-1 planner 400 3 &
pids+=($!)
for i in $(seq 2 "$AGENTS"); do
  agent "worker-$i" worker $((40 + 30 * i)) "1.$i" &
  pids+=($!)
done

echo "sluice demo: sluice-emu at $emu_url, sluiced at $url, $AGENTS agents calling through the proxy"
echo "dashboard: $url/"
# `wait` (unlike a foreground sleep) returns at once when Ctrl-C's trap is due.
if [ "$SECONDS_TO_RUN" -gt 0 ]; then
  sleep "$SECONDS_TO_RUN" &
  pids+=($!)
  wait $!
else
  echo "Ctrl-C stops everything"
  while true; do
    sleep 3600 &
    pids+=($!)
    wait $!
  done
fi
