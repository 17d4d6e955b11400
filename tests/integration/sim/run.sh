#!/usr/bin/env bash
# sim_cli: `sluice sim` end to end: the table, --json keys, byte-identical reruns,
# --out with CSV, JSON-lines event logs and a non-empty PNG, usage errors.
set -euo pipefail
SLUICE=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "sim_cli: $*" >&2; exit 1; }

"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy all >"$tmp/t1"
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy all >"$tmp/t2"
cmp -s "$tmp/t1" "$tmp/t2" || fail "two runs with the same seed differ"
for s in naive sdk-retry backoff semaphore rpm-counter sluice-equal sluice sluice-learned; do
  grep -q "^$s " "$tmp/t1" || fail "table has no row for $s"
done
grep -q '^lower bounds: tokens [0-9.]* s  critical path [0-9.]* s  combined [0-9.]* s$' "$tmp/t1" ||
  fail "table has no bounds line"
grep -q 'mk/bnd p95/bnd mk/tight rewr/task$' "$tmp/t1" || fail "table has no ratio columns"
grep -q '^tight bound [0-9.]* s: ' "$tmp/t1" || fail "table has no tight bound line"
grep -q '^chain bound [0-9.]* s: ' "$tmp/t1" || fail "table has no chain bound line"
grep -q 'makespan over it: naive [0-9.]* sdk-retry [0-9.]* ' "$tmp/t1" ||
  fail "the chain bound line has no ratios"

# scaled without editing the YAML: the header says so, the JSON carries the scales
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy sluice --demand-scale 2 \
  --limits-scale 0.75 --json >"$tmp/sc"
for k in '"limits_scale":0.75' '"demand_scale":2' '"duration_s":9600.000' '"tight_bound_s"' \
         '"least_finish_s"' '"input_bound_s"' '"output_bound_s"' '"rpm_bound_s"' \
         '"tokens_bound_s":null' '"makespan_tight_ratio"' '"prefix_rewrites_per_task"' \
         '"output_tpm_utilization"' '"tasks_total":40' '"chain_bound_s":' \
         '"makespan_chain_ratio":'; do
  grep -qF "$k" "$tmp/sc" || fail "scaled --json lacks $k"
done
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy sluice --demand-scale 2 |
  grep -q '^scaled: limits x1  demand x2  duration 7200 s$' || fail "no scaled line"
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy sluice --duration 100 --json |
  grep -qF '"duration_s":100.000,' || fail "--duration is not the run's duration"

# teams: scale-200's team weights, byte-identical too, with the teams' table and JSON
"$SLUICE" sim --scenario "$SRC/scenarios/scale-200.yaml" >"$tmp/s1"
"$SLUICE" sim --scenario "$SRC/scenarios/scale-200.yaml" >"$tmp/s2"
cmp -s "$tmp/s1" "$tmp/s2" || fail "two scale-200 runs with the same seed differ"
grep -q "^teams: share of tokens served while all 10 teams were backlogged" "$tmp/s1" ||
  fail "scale-200 table has no teams section"
"$SLUICE" sim --scenario "$SRC/scenarios/scale-200.yaml" --strategy sluice --json >"$tmp/sj"
for k in '"all_backlogged_s"' '"teams":[{"team":"t0","weight":3.000' '"weight_share"' \
         '"tokens_backlogged"' '"share"' '"worst_team"' '"worst_team_p95_s"' '"other_teams_p95_s"'; do
  grep -qF "$k" "$tmp/sj" || fail "scale-200 --json lacks $k"
done

"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --json --seed 4 >"$tmp/j"
for k in '"scenario"' '"seed":4' '"lower_bound_s"' '"strategies"' '"http_429"' '"rate_429"' \
         '"tokens_per_task"' '"p50_task_s"' '"p95_task_s"' '"critical_path_wait_s"' \
         '"input_tpm_utilization"' '"makespan_s"' '"tasks_done"' '"wave_period_s"' \
         '"path_bound_s"' '"combined_bound_s"' '"makespan_ratio"' '"p95_task_ratio"' \
         '"requests"' '"tokens_billed"' '"replans"'; do
  grep -q "$k" "$tmp/j" || fail "--json lacks $k"
done

"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --out "$tmp/out" >/dev/null
head -1 "$tmp/out/timeseries.csv" | grep -q '^strategy,t_s,requests,http_429' || fail "bad CSV header"
for s in naive sluice; do
  f="$tmp/out/events-$s.jsonl"
  [ -s "$f" ] || fail "$f is empty"
  head -1 "$f" | grep -q '^{"ts":[0-9.]*,"event":"' || fail "$f is not in the event-log shape"
done
[ -s "$tmp/out/429s.png" ] || fail "no PNG (gnuplot-nox comes from scripts/deps.sh)"

set +e
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown strategy is not a usage error"
for bad in "--limits-scale 0" "--limits-scale x" "--demand-scale 1.5" "--demand-scale 0" \
           "--duration 0"; do
  # shellcheck disable=SC2086
  "$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" $bad >/dev/null 2>"$tmp/err"
  [ $? -eq 2 ] || fail "$bad is not a usage error"
  grep -q -- "${bad%% *}" "$tmp/err" || fail "$bad: the error does not name the option"
done
"$SLUICE" sim --scenario /nonexistent.yaml >/dev/null 2>&1
[ $? -eq 1 ] || fail "missing scenario is not exit 1"
echo "sim_cli: ok"
