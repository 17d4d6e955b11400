#!/usr/bin/env bash
# waste.sh - issue 24 "Measure": how much of the quota the fleet wastes.
#   (a) bench/waste_single.sh, when it exists (one agent proxied vs direct; another
#       helper's script);
#   (b) a `sluice sim` sweep: scale-200 at limits x1, 1/2, 1/5, 1/10, 1/20 and seed-fleet at
#       demand x1, x10, x20, seeds 1-5, strategies sluice, sluice-learned, semaphore and
#       sdk-retry: makespan over the tight bound and over the chain bound, 429s, prefix
#       re-writes per task, input and output utilisation, tasks done; means over the seeds
#       (SEEDS="6 7 8 9 10" for others);
#   (c) bench/waste_fleet.mjs: real agent processes against sluice-emu at tight limits,
#       straight with the SDK's retry and through sluiced (about two minutes).
#
#   (d) with --fleet-variants, instead: (c) again for fleets an outside check could pick
#       (the Redis backend with one and two replicas, OpenAI Chat Completions and
#       Responses agents on a combined TPM, 50 and 3 agents, 1.5 s streamed calls, an
#       output-bound fleet, `output_reserve: learned`, a pool configured below the
#       emulator's limits, an RPM-bound OpenAI fleet), one pair each (about 25 minutes),
#       then each case's clause line: through sluiced no later than direct, 0 emulator
#       429s, >= 0.9 of its own allowance used.
#
#   bench/waste.sh [BUILD_DIR] [--sim-only | --fleet-variants]
#
# Prints what it measures, never gates: exits 0 when every part ran.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)  # absolute: parts run from other directories
SIM_ONLY=${2:-}
SLUICE=$BUILD/src/cli/sluice
[ -x "$SLUICE" ] || { echo "waste: $SLUICE is not built" >&2; exit 1; }

if [ "$SIM_ONLY" = --fleet-variants ]; then
  echo "== (d) the real fleet's variants: bench/waste_fleet.mjs, one pair each"
  export SLUICED=$BUILD/src/server/sluiced SLUICE_EMU=$BUILD/src/emu/sluice-emu
  LOG=$(mktemp -d)
  trap 'rm -rf "$LOG"' EXIT
  # name | arguments (agents turns words) | environment
  while IFS='|' read -r name args env; do
    echo "-- $name: ${env:-defaults} node bench/waste_fleet.mjs $args"
    env $env timeout 900 nice node "$SRC/bench/waste_fleet.mjs" $args > "$LOG/run" || true
    sed -n '1,4p' "$LOG/run"
    sed -n "s/^clause, pair 1: /$name: /p" "$LOG/run" >> "$LOG/clauses"
  done <<'CASES'
memory, 10 agents|10 4 15000|
redis, one sluiced|10 4 15000|BACKEND=redis
redis, two replicas|10 4 15000|BACKEND=redis REPLICAS=2
openai chat|10 4 15000|WASTE_API=chat
openai responses|10 4 15000|WASTE_API=responses
50 agents|50 3 6000|
3 agents|3 8 30000|
1.5 s calls, streamed|10 4 15000|TTFT_MS=1500 WASTE_STREAM=1
output-bound|10 3 500|OUT_TOKENS=3000 BIND=output_tokens
output_reserve learned|10 4 15000|POOL_EXTRA={"output_reserve":"learned"}
pool below the emulator|10 4 15000|POOL_EXTRA={"input_tpm":300000}
pool below, limits_from provider|10 4 15000|POOL_EXTRA={"input_tpm":300000,"limits_from":"provider"}
openai, rpm-bound|20 6 200|WASTE_API=chat EMU_LIMITS={"rpm":60} BIND=requests
CASES
  echo
  echo "== the clause per case (printed, never gated)"
  cat "$LOG/clauses"
  exit 0
fi

if [ -x "$SRC/bench/waste_single.sh" ] && [ "$SIM_ONLY" != --sim-only ]; then
  echo "== (a) one agent, proxied vs direct: bench/waste_single.sh"
  "$SRC/bench/waste_single.sh" "$BUILD"
  echo
fi

SEEDS=${SEEDS:-1 2 3 4 5}
echo "== (b) sluice sim sweep, means over seeds $SEEDS"
python3 - "$SLUICE" "$SRC" "$SEEDS" <<'PY'
import json, subprocess, sys

sluice, src = sys.argv[1], sys.argv[2]
points = [('scale-200', ['--limits-scale', f], 'limits x' + label)
          for f, label in (('1', '1'), ('0.5', '1/2'), ('0.2', '1/5'), ('0.1', '1/10'),
                           ('0.05', '1/20'))]
points += [('seed-fleet', ['--demand-scale', n], 'demand x' + n) for n in ('1', '10', '20')]
strategies = ['sluice', 'sluice-learned', 'semaphore', 'sdk-retry']
seeds = [int(x) for x in sys.argv[3].split()]

def run(scenario, args, strategy, seed):
    out = subprocess.run([sluice, 'sim', '--scenario', f'{src}/scenarios/{scenario}.yaml',
                          '--strategy', strategy, '--seed', str(seed), '--json'] + args,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

mean = lambda xs: sum(xs) / len(xs)
print('%-24s %-15s %9s %8s %8s %8s %10s %6s %6s %9s' % (
    'scenario', 'strategy', 'mk/tight', 'tight s', 'mk/chain', '429s', 'rewr/task', 'ITPM', 'OTPM',
    'done'))
for scenario, args, label in points:
    for st in strategies:
        rows = []
        for seed in seeds:
            d = run(scenario, args, st, seed)
            s = d['strategies'][0]
            rows.append((s['makespan_tight_ratio'], d['tight_bound_s'], s['http_429'],
                         s['prefix_rewrites_per_task'], s['input_tpm_utilization'],
                         s['output_tpm_utilization'], s['tasks_done'], s['tasks_total'],
                         s['makespan_chain_ratio'] or float('nan')))
        done = sum(r[6] for r in rows)
        total = sum(r[7] for r in rows)
        print('%-24s %-15s %9.3f %8.0f %8.3f %8.1f %10.2f %5.0f%% %5.0f%% %9s' % (
            scenario + ' ' + label, st, mean([r[0] for r in rows]), mean([r[1] for r in rows]),
            mean([r[8] for r in rows]), mean([r[2] for r in rows]), mean([r[3] for r in rows]),
            100 * mean([r[4] for r in rows]), 100 * mean([r[5] for r in rows]),
            '%d/%d' % (done, total) if done < total else 'all'))
print()
print('mk/tight: makespan over the tight bound (docs/sim.md, "The tight bound"); tight s: the')
print('bound; mk/chain: makespan over the chain bound (docs/sim.md, "The chain bound");')
print('rewr/task: cache writes of a prefix already written, per task; ITPM, OTPM: input and')
print('output billed over the limit x makespan; done: tasks finished over the seeds when some')
print('run was cut at the duration (its makespan is then the duration).')
PY
echo

if [ "$SIM_ONLY" = --sim-only ]; then exit 0; fi
echo "== (c) real agent processes against sluice-emu: bench/waste_fleet.mjs"
for f in "$BUILD/src/emu/sluice-emu" "$BUILD/src/server/sluiced"; do
  [ -x "$f" ] || { echo "waste: $f is not built" >&2; exit 1; }
done
SLUICED=$BUILD/src/server/sluiced SLUICE_EMU=$BUILD/src/emu/sluice-emu \
  timeout 600 node "$SRC/bench/waste_fleet.mjs"
