#!/usr/bin/env bash
# http.sh - lease-then-settle round trips per second through sluiced, against nginx answering a
# fixed JSON body, both pinned to one core, measured with wrk over keep-alive connections.
# Prints requests/s and p50/p99 latency of each and the ratio. Goal: sluiced >= 0.5x nginx,
# p99 < 2 ms at 50 connections. A second sluiced with a state_file (every grant and settle
# journaled before it is answered, fsync every second) runs in the same script: goal at
# least 0.8x the figure without it.
#
# usage: bench/http.sh [BUILD_DIR]   (env: BENCH_SECONDS=10, BENCH_CONNECTIONS=50)
# needs: wrk, nginx, taskset (Debian: wrk nginx-light util-linux)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BENCH_NAME=http.sh
. bench/http_common.sh

# sluiced: one pool with limits far above what one core can ask for; full buckets at start.
# $1: a name, $2: extra top-level configuration; sets STARTED_PORT (no subshell, so the
# process lands in PIDS and is stopped on exit).
start_sluiced() {
  local name=$1 extra=$2 port
  port=$(free_port)
  cat > "$TMP/$name.yaml" <<YAML
cold_start: full
$extra
pools:
  default:
    input_tpm: 100000000000
    output_tpm: 100000000000
    rpm: 1000000000
YAML
  taskset -c $SERVER_CPU "$SLUICED" --config "$TMP/$name.yaml" --listen "127.0.0.1:$port" \
    >"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
  STARTED_PID=$!
  wait_port "$port"
  STARTED_PORT=$port
}
start_sluiced sluiced ""
SPORT=$STARTED_PORT
SPID=$STARTED_PID
start_sluiced persisted "state_file: $TMP/state"
PPORT=$STARTED_PORT
PPID_=$STARTED_PID

# CPU seconds (user + system) a process used so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# nginx: one worker answering the same size of JSON with `return 200`.
NPORT=$(free_port)
write_nginx_conf <<NGINX
  server {
    listen 127.0.0.1:$NPORT;
    location / {
      default_type application/json;
      return 200 '{"status":"granted","lease":"l_1","pool":"default","expires_at":1796011572.74005,"ttl":120.0,"weight":1.0,"charged":{"input_tokens":100,"output_tokens":10,"requests":1},"waited":0.0}\n';
    }
  }
}
NGINX
taskset -c $SERVER_CPU nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)
wait_port "$NPORT"

echo "== wrk: $CONNS connections, ${SECONDS_RUN}s each; servers on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run_wrk() { # port name (SECONDS_RUN from the environment when given)
  taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d"${SECONDS_RUN}s" --latency \
    -s bench/http_lease.lua "http://127.0.0.1:$1" | tee "$TMP/wrk-$2.txt" | summarize
}
taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d1s -s bench/http_lease.lua "http://127.0.0.1:$SPORT" >/dev/null
taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d1s -s bench/http_lease.lua "http://127.0.0.1:$PPORT" >/dev/null
c0=$(cpu_s "$SPID")
read -r s_rps s_p50 s_p99 _ < <(run_wrk "$SPORT" sluiced)
c1=$(cpu_s "$SPID")
d0=$(cpu_s "$PPID_")
read -r p_rps p_p50 p_p99 _ < <(run_wrk "$PPORT" persisted)
d1=$(cpu_s "$PPID_")
read -r n_rps n_p50 n_p99 _ < <(run_wrk "$NPORT" nginx)
# On a shared machine one pair is noise: BENCH_PAIRS more short runs alternate the two
# sluiced (without, with the state file) and the median of their ratios is printed too.
PAIRS=${BENCH_PAIRS:-6}
ratios=()
for _ in $(seq 1 "$PAIRS"); do
  read -r a _ _ < <(SECONDS_RUN=2 run_wrk "$SPORT" pair-a)
  read -r b _ _ < <(SECONDS_RUN=2 run_wrk "$PPORT" pair-b)
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b/a }')")
done
errors=$(grep -hE "Non-2xx|Socket errors" "$TMP/wrk-sluiced.txt" "$TMP/wrk-persisted.txt" || true)

printf "%-40s %12s %10s %10s\n" "server" "requests/s" "p50 ms" "p99 ms"
printf "%-40s %12.0f %10.3f %10.3f\n" "sluiced (lease, settle alternating)" "$s_rps" "$s_p50" "$s_p99"
printf "%-40s %12.0f %10.3f %10.3f\n" "sluiced with state_file (fsync 1 s)" "$p_rps" "$p_p50" "$p_p99"
printf "%-40s %12.0f %10.3f %10.3f\n" "nginx (return 200, fixed JSON)" "$n_rps" "$n_p50" "$n_p99"
awk -v s="$s_rps" -v n="$n_rps" 'BEGIN { printf "ratio sluiced/nginx: %.2f (goal >= 0.50); lease-then-settle round trips/s: %.0f\n", s/n, s/2 }'
awk -v s="$s_rps" -v p="$p_rps" 'BEGIN { printf "ratio with state_file/without: %.2f (goal >= 0.80)\n", p/s }'
# CPU per request is less at the mercy of other load on the machine than requests/s.
awk -v a0="$c0" -v a1="$c1" -v n="$s_rps" -v b0="$d0" -v b1="$d1" -v m="$p_rps" -v t="$SECONDS_RUN" \
  'BEGIN { x = (a1 - a0) / (n * t) * 1e6; y = (b1 - b0) / (m * t) * 1e6;
           printf "sluiced CPU per request: %.1f us without the state file, %.1f us with it (%.2fx the throughput one core allows)\n", x, y, x / y }'
echo "alternating 2 s pairs, with/without: ${ratios[*]}; median $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
echo "state file after the run: $(stat -c %s "$TMP/state") bytes"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$errors" ] && echo "sluiced wrk reported: $errors"
curl -s "http://127.0.0.1:$SPORT/metrics" | grep -E '^sluice_(leases_total|settles_total)\{.*(granted|settled)' || true
