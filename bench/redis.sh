#!/bin/sh
# bench/redis.sh - the Redis backend's figures: bench_redis (round trips, memory vs redis, one and two
# replicas) and redis-benchmark on the raw acquire function (FCALL sluice_request) on a private server.
# Usage: bench/redis.sh BUILD_DIR
set -eu
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../tests/integration/redis/with-redis.sh" sh -c '
set -eu
"$0/bench/bench_redis" "$SLUICE_REDIS_PORT" 3
p=$SLUICE_REDIS_PORT
key="sluice:{default}:pool"
echo
echo "redis-benchmark, FCALL sluice_request (one grant per call, 1 and 16 clients):"
for c in 1 16; do
  redis-benchmark -p "$p" -n 20000 -c "$c" -q FCALL sluice_request 1 "$key" "" "" agent bench input_tokens 1 output_tokens 0 | tr "\r" "\n" | tail -1
done
echo "baseline, FCALL sluice_version (no state):"
redis-benchmark -p "$p" -n 20000 -c 16 -q FCALL sluice_version 0 | tr "\r" "\n" | tail -1
' "$build"
