#!/bin/sh
# bench/redis.sh - the Redis backend's figures: bench_redis (round trips, memory vs redis, one and two
# replicas) and redis-benchmark on the raw acquire function (FCALL sluice_request) on a private server,
# each with the Redis CPU time per FCALL (INFO commandstats, usec_per_call), and the Redis CPU per
# request, ticket poll and cancel with 0, 1,000 and 10,000 requests queued (bench_redis_queue).
# Usage: bench/redis.sh BUILD_DIR
set -eu
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../tests/integration/redis/with-redis.sh" sh -c '
set -eu
p=$SLUICE_REDIS_PORT
cpu() {
  redis-cli -p "$p" info commandstats | sed -n "s/^cmdstat_fcall:.*usec_per_call=\([0-9.]*\).*/  Redis CPU per FCALL: \1 us/p"
  redis-cli -p "$p" config resetstat >/dev/null
}
redis-cli -p "$p" config resetstat >/dev/null
"$0/bench/bench_redis" "$p" 3
cpu
key="sluice:{default}:pool"
echo
echo "redis-benchmark, FCALL sluice_request (one grant per call, 1 and 16 clients):"
for c in 1 16; do
  redis-benchmark -p "$p" -n 20000 -c "$c" -q FCALL sluice_request 1 "$key" "" "" agent bench input_tokens 1 output_tokens 0 | tr "\r" "\n" | tail -1
  cpu
done
echo "baseline, FCALL sluice_version (no state):"
redis-benchmark -p "$p" -n 20000 -c 16 -q FCALL sluice_version 0 | tr "\r" "\n" | tail -1
cpu
echo
"$0/bench/bench_redis_queue" "$p" 0 1000 10000
' "$build"
