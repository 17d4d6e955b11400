# http_common.sh - what the HTTP benchmarks share (sourced by bench/http.sh and bench/limits_http.sh):
# the tool check, the two CPUs, a temporary directory stopped and removed on exit, free ports,
# waiting for a listener, wrk's summary and the common part of an nginx configuration.
#
# Before sourcing: set -euo pipefail, the working directory the repository, BENCH_NAME
# (for messages), BUILD. Sets SLUICED, SECONDS_RUN, CONNS, SERVER_CPU, CLIENT_CPU, TMP,
# PIDS (append the pid of every process started; each is killed on exit).
SECONDS_RUN=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNECTIONS:-50}
SLUICED=$BUILD/src/server/sluiced
for tool in wrk nginx taskset; do
  command -v "$tool" >/dev/null || { echo "$BENCH_NAME: $tool is not installed" >&2; exit 1; }
done
[ -x "$SLUICED" ] || { echo "$BENCH_NAME: build sluiced first ($SLUICED)" >&2; exit 1; }

SERVER_CPU=0
CLIENT_CPU=$(( $(nproc) > 1 ? 1 : 0 ))
TMP=$(mktemp -d "/tmp/sluice-bench-${BENCH_NAME%.sh}.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # port
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "$BENCH_NAME: nothing listening on port $1" >&2
  exit 1
}

# wrk output -> "rps p50_ms p99_ms non2xx"
summarize() {
  awk '
    function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
    /Requests\/sec:/ { rps = $2 }
    /^ +50%/ { p50 = ms($2) }
    /^ +99%/ { p99 = ms($2) }
    /Non-2xx or 3xx responses:/ { non = $5 }
    END { printf "%s %.3f %.3f %d\n", rps, p50, p99, non }'
}

# Writes $TMP/nginx/nginx.conf for one worker: the head up to `http {` and its temporary
# paths, then the rest of the http block from stdin.
write_nginx_conf() {
  mkdir -p "$TMP/nginx/logs"
  {
    cat <<NGINX
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy;
  fastcgi_temp_path $TMP/nginx/fastcgi;
  uwsgi_temp_path $TMP/nginx/uwsgi;
  scgi_temp_path $TMP/nginx/scgi;
NGINX
    cat
  } > "$TMP/nginx/nginx.conf"
}
