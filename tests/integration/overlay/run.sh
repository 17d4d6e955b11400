#!/usr/bin/env bash
# overlay_cli: `sluice overlay` on synthetic logs with a known cause (synth.py) in every
# input shape, on the simulator's own event logs, and its usage and input errors.
set -euo pipefail
SLUICE=$1
SRC=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "overlay_cli: $*" >&2; exit 1; }
has() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "$1 lacks: $2"; }; }
here=$(dirname "$0")

for k in work retries backoff noise; do python3 "$here/synth.py" $k "$tmp/$k"; done

# Turns every 30 s, 429s 1-3 s after them: period 30 s, the work, in every input shape.
"$SLUICE" overlay --events "$tmp/work/events.sse" >"$tmp/o"
has "$tmp/o" "429s: upstream_429 events; turns: granted (not after the agent's 429) events"
has "$tmp/o" "matched per agent"
has "$tmp/o" "period: bin 5 s, lags 10-190 s searched"
has "$tmp/o" "429s       every 30 s"
has "$tmp/o" "within 5 s after a turn start     312  100.0%"
has "$tmp/o" "verdict: the 429s line up with the work, not the retries: 100% of them"
"$SLUICE" overlay --429s "$tmp/work/429s.csv" --turns "$tmp/work/turns.csv" >"$tmp/o"
has "$tmp/o" "fleet-wide"
has "$tmp/o" "verdict: the 429s line up with the work"
"$SLUICE" overlay --429s "$tmp/work/429s_iso.csv" --turns "$tmp/work/turns_iso.csv" \
  --time-column when --agent-column agent --bin 10 >"$tmp/o"
has "$tmp/o" "matched per agent"
has "$tmp/o" "429s       every 30 s"
has "$tmp/o" "verdict: the 429s line up with the work"
# --429-event and --turn-event name the events read as each (here swapped on purpose).
"$SLUICE" overlay --events "$tmp/work/events.sse" --429-event granted --turn-event upstream_429 >"$tmp/o"
has "$tmp/o" "429s: granted events; turns: upstream_429 events"
has "$tmp/o" "429s 712, turn starts 312"
# The same capture read as JSON lines (sluiced's event_log) gives the same report.
grep '^data: ' "$tmp/work/events.sse" | sed 's/^data: //' >"$tmp/work/events.jsonl"
diff <("$SLUICE" overlay --events "$tmp/work/events.sse" | tail -n +2) \
     <("$SLUICE" overlay --events "$tmp/work/events.jsonl" | tail -n +2) >/dev/null ||
  fail "SSE and JSON lines of one log differ"

# 429s right after earlier 429s (exponential backoff, agents out of phase): the retries.
"$SLUICE" overlay --events "$tmp/retries/events.sse" >"$tmp/o"
has "$tmp/o" "verdict: the 429s line up with the retries, not the work: 74% of them"
# Retries after a 3-11 s backoff (longer than the window): each 429 comes right after a
# retry, not right after the 429 before; the retries are named (issue 25 item 13).
"$SLUICE" overlay --events "$tmp/backoff/events.sse" >"$tmp/o"
has "$tmp/o" "within 5 s after a retry          161   74.9%  (215 retries seen)"
has "$tmp/o" "verdict: the 429s line up with the retries, not the work: 75% of them came within 5 s after a retry (161)"
"$SLUICE" overlay --429s "$tmp/backoff/429s_iso.csv" --turns "$tmp/backoff/turns_iso.csv" \
  --retries "$tmp/backoff/retries_iso.csv" --time-column when --agent-column agent >"$tmp/o"
has "$tmp/o" ", retries $tmp/backoff/retries_iso.csv"
has "$tmp/o" "verdict: the 429s line up with the retries, not the work: 75% of them"
# Without the retries' times the 429s 3-11 s apart are nobody's: said, not guessed.
"$SLUICE" overlay --429s "$tmp/backoff/429s_iso.csv" --turns "$tmp/backoff/turns_iso.csv" \
  --time-column when --agent-column agent >"$tmp/o"
has "$tmp/o" "verdict: no pattern"
# Fleet-wide, a cluster of retries is indistinguishable from chance: said, not guessed.
"$SLUICE" overlay --events "$tmp/retries/events.sse" --fleet >"$tmp/o"
has "$tmp/o" "verdict: no pattern"
# Unrelated times: no pattern; too few 429s: no verdict.
"$SLUICE" overlay --events "$tmp/noise/events.sse" >"$tmp/o"
has "$tmp/o" "verdict: no pattern: 0% of the 429s"
"$SLUICE" overlay --events "$tmp/noise/events.sse" --min-429s 50 >"$tmp/o"
has "$tmp/o" "verdict: no pattern: 40 429s, fewer than the 50 a verdict needs."

# --out draws both series; a capture cut off mid-line is read up to the cut.
"$SLUICE" overlay --events "$tmp/work/events.sse" --out "$tmp/work.png" >"$tmp/o"
[ -s "$tmp/work.png" ] || fail "no PNG (gnuplot-nox comes from scripts/deps.sh)"
head -c -20 "$tmp/work/events.jsonl" >"$tmp/cut.jsonl"
"$SLUICE" overlay --events "$tmp/cut.jsonl" >"$tmp/o" 2>"$tmp/e"
has "$tmp/e" "the last line was cut off mid-event; skipped"

# The simulator's own logs: naive 1 s retries are retry storms; sluice has no 429s.
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy naive --out "$tmp/sim" >/dev/null
"$SLUICE" sim --scenario "$SRC/scenarios/seed-fleet.yaml" --strategy sluice --out "$tmp/sim2" >/dev/null
"$SLUICE" overlay --events "$tmp/sim/events-naive.jsonl" >"$tmp/o"
has "$tmp/o" "429s: http_429 events; turns: turn events"
has "$tmp/o" "429s       every 10 s"
has "$tmp/o" "verdict: the 429s line up with the retries"
"$SLUICE" overlay --events "$tmp/sim2/events-sluice.jsonl" >"$tmp/o"
has "$tmp/o" "verdict: no pattern: 0 429s"

# Bad input names the file, the line and the value (exit 1); usage errors exit 2.
expect() { # CODE MESSAGE ARGS...
  local code=$1 msg=$2; shift 2
  set +e; "$SLUICE" overlay "$@" >/dev/null 2>"$tmp/e"; local rc=$?; set -e
  [ $rc -eq "$code" ] || fail "overlay $* exited $rc, not $code"
  has "$tmp/e" "$msg"
}
printf '1796011200\n1796011201.5\nsoon\n' >"$tmp/bad.csv"
expect 1 "$tmp/bad.csv:3: \"soon\" is not a timestamp (Unix seconds or ISO-8601)" \
  --429s "$tmp/bad.csv" --turns "$tmp/work/turns.csv"
printf 'when\n2026-13-01T00:00:00Z\n' >"$tmp/bad_iso.csv"
expect 1 "$tmp/bad_iso.csv:2: \"2026-13-01T00:00:00Z\" is not a timestamp" \
  --429s "$tmp/work/429s_iso.csv" --turns "$tmp/bad_iso.csv" --time-column when
expect 1 "--time-column: no column \"at\" in the header" \
  --429s "$tmp/work/429s_iso.csv" --turns "$tmp/work/turns_iso.csv" --time-column at
printf '{"ts":1,"event":"granted"}\n{"event":"upstream_429","ts":"late"}\n' >"$tmp/bad.jsonl"
expect 1 "$tmp/bad.jsonl:2: \"ts\": \"late\" is not a timestamp in seconds" --events "$tmp/bad.jsonl"
printf 'event: granted\ndata: {"ts":1,"event":"granted"}\n\nhello\n' >"$tmp/bad.sse"
expect 1 "$tmp/bad.sse:4: \"hello\" is neither a JSON event nor an SSE line" --events "$tmp/bad.sse"
expect 1 "/nonexistent.log: No such file or directory" --events /nonexistent.log
expect 2 "give either --events FILE or both" --429s "$tmp/work/429s.csv"
expect 2 "--window: \"0\" is not a positive number of seconds" --events "$tmp/bad.jsonl" --window 0
expect 2 "unknown option or missing value \"--period\"" --events "$tmp/bad.jsonl" --period
expect 2 "--time-column, --agent-column and --retries go with --429s/--turns" \
  --events "$tmp/bad.jsonl" --retries "$tmp/bad.jsonl"
echo "overlay_cli: ok"
