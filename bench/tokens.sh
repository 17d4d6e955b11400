#!/usr/bin/env bash
# tokens.sh - what the number of agent tokens costs sluiced: load time, RSS and lease round trips
# per second with a tokens_file of 1 (the reference), 2,000 and 100,000 hashed tokens, measured
# in one run by bench/tokens.py (Python 3 standard library). Cut at 15 minutes.
#
# usage: bench/tokens.sh [BUILD_DIR]     env: BENCH_TOKENS="2000 100000" BENCH_SECONDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SLUICED=$BUILD/src/server/sluiced
[ -x "$SLUICED" ] || { echo "tokens.sh: build sluiced first ($SLUICED)" >&2; exit 1; }
exec timeout 900 python3 bench/tokens.py "$SLUICED"
