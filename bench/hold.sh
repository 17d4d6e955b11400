#!/bin/sh
# hold.sh - where the agents of `sluice sim`'s "sluice" strategy spend their waits: held in
# sluiced's queue, or asleep after a REJECT until retry_at (issue 24 item 5). scale-200 at
# 1/10 and 1/20 of its limits (input_tpm, output_tpm and rpm divided; duration raised so every
# task finishes), seeds 1-5. Per run it prints the makespan, its ratio to the sim's lower
# bound, input-TPM utilisation, the share of the agents' waiting time spent asleep after a
# REJECT, and "idle while asleep": seconds in which some agent slept after a REJECT while
# nobody was queued (capacity that nobody was in line for), as a share of the makespan.
#
#   bench/hold.sh [BUILD_DIR] [STRATEGY]      (defaults: build, sluice)
#
# Prints figures, never gates.
set -eu
BUILD=${1:-build}
STRATEGY=${2:-sluice}
SLUICE="$BUILD/src/cli/sluice"
[ -x "$SLUICE" ] || { echo "hold: $SLUICE is not built" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for div in 10 20; do
  python3 - "$HERE/scenarios/scale-200.yaml" "$div" >"$tmp/div$div.yaml" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
div = int(sys.argv[2])
text = re.sub(r"^duration_s: .*$", "duration_s: 60000", text, flags=re.M)
text = re.sub(r"^(  (?:input_tpm|output_tpm|rpm): )(\d+)",
              lambda m: m.group(1) + str(int(m.group(2)) // div), text, flags=re.M)
sys.stdout.write(text)
EOF
done

printf '%-6s %-4s %9s %7s %6s %12s %16s\n' limits seed makespan mk/bnd ITPM 'asleep/wait' 'idle while asleep'
for div in 10 20; do
  for seed in 1 2 3 4 5; do
    out="$tmp/out-$div-$seed"
    "$SLUICE" sim --scenario "$tmp/div$div.yaml" --strategy "$STRATEGY" --seed "$seed" --json \
      --out "$out" >"$tmp/r.json"
    python3 - "$tmp/r.json" "$out/events-$STRATEGY.jsonl" "1/$div" "$seed" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))["strategies"][0]
asleep = queued = 0.0          # agent-seconds asleep after a REJECT / held in the queue
sleeping, waiting = {}, {}     # agent -> since when (asleep; queued)
idle_s, last_t = 0.0, 0.0
for line in open(sys.argv[2]):
    ev = json.loads(line)
    t, kind, agent = ev["ts"], ev["event"], ev.get("agent")
    if sleeping and not waiting:
        idle_s += t - last_t
    last_t = t
    if kind in ("rejected", "queued", "granted") and agent in sleeping:
        asleep += t - sleeping.pop(agent)
    if kind == "rejected":
        sleeping[agent] = t
    elif kind == "queued":
        waiting[agent] = t
    elif kind in ("granted", "ticket_rejected", "ticket_expired", "ticket_cancelled") and agent in waiting:
        queued += t - waiting.pop(agent)
        if kind == "ticket_rejected":
            sleeping[agent] = t
total = asleep + queued
mk = report["makespan_s"]
print("%-6s %-4s %8.0fs %7.2f %5.0f%% %11.0f%% %9.0fs %4.1f%%" % (
    sys.argv[3], sys.argv[4], mk, report["makespan_ratio"],
    100 * report["input_tpm_utilization"], 100 * asleep / total if total else 0,
    idle_s, 100 * idle_s / mk if mk else 0))
EOF
  done
done
