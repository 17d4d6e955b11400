#!/usr/bin/env bash
# sim_vs_emu.sh - the simulator checked against the emulator: the workload of the proxy
# fleet proof (tests/e2e/proxy_fleet.test.mjs, described as scenarios/proxy-fleet.yaml)
# run in `sluice sim` and for real (20 SDK agents against sluice-emu, straight to it with
# the SDK's retry, then through sluiced); prints both runs' 429s, tokens billed and finish
# time side by side, with the simulator's range over seeds 1-10.
#
#   bench/sim_vs_emu.sh [BUILD_DIR]      (default: build; needs node and tests/node_modules)
#
# Pairs: the direct run against strategy sdk-retry (what the SDK does: retry-after
# honoured, maxRetries 2, then the turn breaks); the run through sluiced against
# sluice-equal (the proxy: every agent weight 1, no task graph, no checkpoint).
# Differences over 15% are marked '*'; docs/sim.md explains them. Prints figures, never
# gates on them: exits 0 when both sides ran, whatever the numbers.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)  # absolute: parts run from other directories
SLUICE=$BUILD/src/cli/sluice
SCENARIO=$SRC/scenarios/proxy-fleet.yaml
for f in "$SLUICE" "$BUILD/src/emu/sluice-emu" "$BUILD/src/server/sluiced"; do
  [ -x "$f" ] || { echo "sim_vs_emu: $f is not built" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$SLUICE" sim --scenario "$SCENARIO" --json >"$tmp/sim.json"
for seed in 1 2 3 4 5 6 7 8 9 10; do
  "$SLUICE" sim --scenario "$SCENARIO" --json --seed "$seed" >>"$tmp/seeds.jsonl"
done

# The real run: the proof itself, unchanged. Its own checks may fail (it exits 1 then);
# the figures it printed are what is compared here.
(cd "$SRC/tests/e2e" && SLUICED=$BUILD/src/server/sluiced SLUICE_EMU=$BUILD/src/emu/sluice-emu \
   node proxy_fleet.test.mjs) >"$tmp/real.txt" 2>&1 || true

python3 - "$tmp/sim.json" "$tmp/seeds.jsonl" "$tmp/real.txt" <<'EOF'
import json, re, sys

sim = json.load(open(sys.argv[1]))
seeds = [json.loads(l) for l in open(sys.argv[2])]
text = open(sys.argv[3]).read()

def real_row(label):
    m = re.search(re.escape(label) + r'\s+upstream 429s\s+(\d+).*?billed tokens\s+(\d+)\s+'
                  r'provider calls\s+(\d+)\s+broken turns\s+(\d+)\s+gave up (\d+)\s+finish ([0-9.]+) s',
                  text)
    if not m:
        sys.stdout.write(text)
        sys.exit('sim_vs_emu: the real run printed no "%s" line' % label)
    return {'http_429': int(m[1]), 'tokens_billed': int(m[2]), 'requests': int(m[3]),
            'replans': int(m[4]), 'gave_up': int(m[5]), 'finish_s': float(m[6])}

def sim_row(doc, name):
    s = next(x for x in doc['strategies'] if x['name'] == name)
    return {'http_429': s['http_429'], 'tokens_billed': s['tokens_billed'],
            'requests': s['requests'], 'replans': s['replans'], 'finish_s': s['makespan_s'],
            'done': s['tasks_done']}

def diff(sim_v, real_v):
    if real_v == 0:
        return ('   0%' if sim_v == 0 else '    -'), sim_v != 0
    d = (sim_v - real_v) / real_v
    return '%+5.0f%%' % (100 * d), abs(d) > 0.15

cols = [('http_429', '429s', '%d'), ('tokens_billed', 'tokens billed', '%d'),
        ('finish_s', 'finish s', '%.1f'), ('requests', 'calls', '%d'),
        ('replans', 'broken turns', '%d')]
print('proxy fleet: %s, sim seed %d; real: tests/e2e/proxy_fleet.test.mjs' %
      (sim['scenario'], sim['seed']))
print('bounds (sim): tokens %.1f s, critical path %.1f s' %
      (sim['lower_bound_s'], sim['path_bound_s']))
print()
print('%-34s' % 'run' + ''.join('%16s' % c[1] for c in cols))
for real_label, strat in (('direct + retry', 'sdk-retry'), ('through sluice', 'sluice-equal')):
    r, s = real_row(real_label), sim_row(sim, strat)
    print('%-34s' % ('real: ' + real_label) + ''.join('%16s' % (f % r[k]) for k, _, f in cols))
    print('%-34s' % ('sim:  ' + strat) + ''.join('%16s' % (f % s[k]) for k, _, f in cols))
    cells = []
    for k, _, f in cols:
        txt, big = diff(s[k], r[k])
        cells.append('%16s' % (txt + ('*' if big else ' ')))
    print('%-34s' % '      sim vs real' + ''.join(cells))
    rows = [sim_row(d, strat) for d in seeds]
    rng = ['%d-%d' % (min(x[k] for x in rows), max(x[k] for x in rows)) if f == '%d' else
           '%.1f-%.1f' % (min(x[k] for x in rows), max(x[k] for x in rows)) for k, _, f in cols]
    print('%-34s' % ('sim:  %s, seeds 1-10' % strat) + ''.join('%16s' % x for x in rng))
    if r['gave_up']:
        print('      (real: %d agents gave up after 6 broken turns)' % r['gave_up'])
    print()
print('* more than 15% apart: docs/sim.md, "Checked against the emulator", says why.')
EOF
