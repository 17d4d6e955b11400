#!/usr/bin/env bash
# limits_http.sh - action-limit check decisions per second through sluiced (memory, one core)
# against nginx's limit_req (a leaky bucket in shared memory) answering the same requests,
# both pinned to one core, measured with wrk over keep-alive connections. Prints decisions/s,
# p50/p99 and the ratio (goal: sluiced >= 1x nginx), and how many sluiced allowed and denied.
# Prints, never gates.
#
# Both limit 100 agents to 100 per second each with a burst of 100 (sluiced: token_bucket;
# nginx: limit_req rate=100r/s burst=100 nodelay), so at these request rates most checks
# are denied by both: 200 when allowed, 429 when not.
#
# With LIMITS_BACKEND=redis://HOST:PORT/0 sluiced runs on that Redis backend, so each check is
# one FCALL of limits.lua (the same requests, the same nginx): what sharing the limits costs.
#
# usage: bench/limits_http.sh [BUILD_DIR]   (env: BENCH_SECONDS=10, BENCH_CONNECTIONS=50,
#        LIMITS_BACKEND unset = memory)
# needs: wrk, nginx, taskset (Debian: wrk nginx-light util-linux)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BENCH_NAME=limits_http.sh
. bench/http_common.sh

cat > "$TMP/sluice.yaml" <<YAML
${LIMITS_BACKEND:+backend: $LIMITS_BACKEND}
limits:
  tool.call:
    algorithm: token_bucket
    rate: 100
    period_s: 1
    burst: 100
YAML
SPORT=$(free_port)
taskset -c $SERVER_CPU "$SLUICED" --config "$TMP/sluice.yaml" --listen "127.0.0.1:$SPORT" \
  >"$TMP/sluiced.log" 2>&1 &
PIDS+=($!)
wait_port "$SPORT"
if [ -n "${LIMITS_BACKEND:-}" ]; then # until Redis is up: before that checks are local
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$SPORT/readyz" >/dev/null && break; sleep 0.1; done
fi

NPORT=$(free_port)
# limit_req runs in the preaccess phase, after `return` (rewrite phase) would have answered,
# so the location falls through try_files to a named location that answers.
write_nginx_conf <<NGINX
  limit_req_zone \$http_x_agent zone=agents:10m rate=100r/s;
  limit_req_status 429;
  server {
    listen 127.0.0.1:$NPORT;
    root $TMP/nginx/www;
    location / {
      limit_req zone=agents burst=100 nodelay;
      try_files /nonexistent @ok;
    }
    location @ok {
      default_type application/json;
      return 200 '{"allowed":true,"limit":100,"remaining":57,"reset_after":0.43,"retry_after":0,"delay":0,"checked":[{"limit":"tool.call","key":"a1","remaining":57}]}\n';
    }
  }
}
NGINX
mkdir -p "$TMP/nginx/www"
taskset -c $SERVER_CPU nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)
wait_port "$NPORT"

echo "== wrk: $CONNS connections, ${SECONDS_RUN}s each; servers on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d1s -s bench/http_limit.lua "http://127.0.0.1:$SPORT" >/dev/null
read -r s_rps s_p50 s_p99 s_non < <(taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d"${SECONDS_RUN}s" \
  --latency -s bench/http_limit.lua "http://127.0.0.1:$SPORT" | tee "$TMP/wrk-sluiced.txt" | summarize)
read -r n_rps n_p50 n_p99 n_non < <(taskset -c $CLIENT_CPU wrk -t1 -c"$CONNS" -d"${SECONDS_RUN}s" \
  --latency -s bench/http_limit.lua "http://127.0.0.1:$NPORT" | tee "$TMP/wrk-nginx.txt" | summarize)

printf "%-34s %12s %10s %10s %14s\n" "server" "decisions/s" "p50 ms" "p99 ms" "denied (429)"
printf "%-34s %12.0f %10.3f %10.3f %14d\n" "sluiced (token_bucket per agent${LIMITS_BACKEND:+, redis}) " "$s_rps" "$s_p50" "$s_p99" "$s_non"
printf "%-34s %12.0f %10.3f %10.3f %14d\n" "nginx (limit_req per X-Agent)" "$n_rps" "$n_p50" "$n_p99" "$n_non"
awk -v s="$s_rps" -v n="$n_rps" 'BEGIN { printf "ratio sluiced/nginx: %.2f (goal >= 1.0)\n", s/n }'
curl -s "http://127.0.0.1:$SPORT/metrics" | grep -E '^sluice_limit_checks_total' || true
