#!/usr/bin/env bash
# make_run.sh - the README's `make run`, for real: it must install what is missing (a no-op
# here), build, and start sluiced with examples/sluice.yaml, printing where it listens and
# a first curl; that curl must then be granted, and the README's quick start must work
# pasted as it is. Runs on a free port, bounded in time.
# usage: make_run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp /tmp/sluice-make-run.XXXXXX)
cd "$src"
# It builds sluiced alone: on a fresh clone a configure and one target, not every test.
builds=$(make -n --no-print-directory run BUILD="$build" | grep -- '^cmake --build' || true)
[ "$(wc -l <<<"$builds")" -eq 1 ] && grep -Eq -- "--target sluiced$" <<<"$builds" \
  || { echo "make_run.sh: make run builds: $builds"; exit 1; }
setsid make --no-print-directory run BUILD="$build" RUN_LISTEN="127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
cleanup() { kill -TERM -- "-$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
for _ in $(seq 1 600); do # up to 60 s: setup checks and a no-op build come first
  grep -q "listening on http://127.0.0.1:$port" "$log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "make_run.sh: make run exited"; exit 1; }
  sleep 0.1
done
grep -q "listening on http://127.0.0.1:$port" "$log" || { cat "$log"; echo "make_run.sh: sluiced did not start"; exit 1; }
grep -q "first call to try" "$log" || { cat "$log"; echo "make_run.sh: no first curl printed"; exit 1; }
# The curl `make run` printed, run as printed.
cmd=$(grep -o "curl -s -X POST .*" "$log" | head -n 1)
out=$(eval "$cmd")
echo "$out" | grep -q '"status":"granted"' || { echo "make_run.sh: the printed curl gave: $out"; exit 1; }
# The README's first screen, pasted as it is (only the port differs): the lease id it
# reads from the answer must settle, and the bad request must name its field.
block=$(awk '/^Then, in another terminal/{f=1; next} f && /^```sh$/{g=1; next} g && /^```$/{exit} g' README.md)
[ -n "$block" ] || { echo "make_run.sh: no quick-start block in README.md"; exit 1; }
out=$(bash -c "${block//127.0.0.1:8750/127.0.0.1:$port}" 2>&1)
for want in 'lease l_' '"status":"settled"' '"type":"invalid_request"' '"margin"'; do
  echo "$out" | grep -qF "$want" || { echo "make_run.sh: README's quick start gave no $want: $out"; exit 1; }
done
echo "make_run.sh: make run serves on 127.0.0.1:$port; the printed curl was granted; README's quick start works"
