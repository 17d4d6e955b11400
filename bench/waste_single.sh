#!/bin/sh
# waste_single.sh - issue 24 "Measure" (a): one agent straight to sluice-emu and through
# sluiced's proxy, side by side in one run: three sequential max_tokens 128000 Messages
# calls, and a real `claude -p` three-turn tool task on the default model (when
# tests/node_modules is installed), each with the proxied/direct ratio of the
# fastest runs. Offline (tests/harness/offline.sh); bounded: every call and session is
# killed after 120 s, about a minute in all when nothing queues.
#
#   bench/waste_single.sh [BUILD_DIR]     (default: build; WASTE_ROUNDS=2 rounds each)
#
# Prints figures, never gates on them.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)  # absolute: parts run from other directories
for f in "$BUILD/src/emu/sluice-emu" "$BUILD/src/server/sluiced"; do
  [ -x "$f" ] || { echo "waste_single: $f is not built" >&2; exit 1; }
done
cd "$SRC/tests/harness"
SLUICE_EMU=$BUILD/src/emu/sluice-emu SLUICED=$BUILD/src/server/sluiced \
  exec timeout 900 ./offline.sh node "$SRC/bench/waste_single.mjs"
