#!/usr/bin/env bash
# adversarial.sh - issue 25's adversarial numbers, measured in one run: sluiced's RSS per agent
# name after a flood of fresh names (bounds lifted, default bounds, with forgetting), and the
# p50/p99 lease latency of an innocent agent quiet, under 1,000 event streams that are never
# read, and under the agent-name flood. The work is bench/adversarial.py (Python 3 standard
# library); every phase is bounded and the whole run is cut at 15 minutes.
#
# usage: bench/adversarial.sh [BUILD_DIR] [REFERENCE_SLUICED]
#   REFERENCE_SLUICED: another sluiced (e.g. main's build) run through the same phases.
#   env: BENCH_NAMES=20000 BENCH_STREAMS=1000 BENCH_PHASE_S=8
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SLUICED=$BUILD/src/server/sluiced
[ -x "$SLUICED" ] || { echo "adversarial.sh: build sluiced first ($SLUICED)" >&2; exit 1; }
ulimit -n 8192 2>/dev/null || true # a thousand streams need their descriptors
exec timeout 900 python3 bench/adversarial.py "$SLUICED" ${2:+"$2"}
