#!/bin/sh
# with-redis.sh - runs a command with a private redis-server on a free 127.0.0.1 port, then stops it.
# Usage: with-redis.sh CMD ARGS...  The command sees SLUICE_REDIS_PORT, SLUICE_REDIS_PID,
# SLUICE_REDIS_DIR (holding redis.conf, so a test may stop and restart the server).
# Fails when redis-server is not installed (scripts/deps.sh installs it).
set -u
command -v redis-server >/dev/null 2>&1 || { echo "with-redis.sh: FAIL: redis-server not installed (scripts/deps.sh)"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-redis.XXXXXX")
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null
    sleep 0.2
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 ))
    cat > "$dir/redis.conf" <<CONF
bind 127.0.0.1
port $port
dir $dir
save ""
appendonly no
daemonize no
pidfile $dir/redis.pid
logfile $dir/redis.log
CONF
    redis-server "$dir/redis.conf" &
    pid=$!
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
        SLUICE_REDIS_PORT=$port SLUICE_REDIS_PID=$pid SLUICE_REDIS_DIR=$dir "$@"
        exit $?
    fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
done
echo "with-redis.sh: could not start redis-server" >&2
exit 1
