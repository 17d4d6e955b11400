#!/bin/sh
# bench/redis_limits.sh - action limits on Redis: limits.lua (one FCALL per check) against seed 001's
# DistributedRateLimiter (a ZSET pipeline) on one private redis-server, same run (bench_redis_limits).
# Usage: bench/redis_limits.sh BUILD_DIR [CHECKS] [DEPTH] [ROUNDS]
set -eu
build=${1:-build}
checks=${2:-20000}
depth=${3:-16}
rounds=${4:-5}
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../tests/integration/redis/with-redis.sh" sh -c '
exec "$0/bench/bench_redis_limits" "$SLUICE_REDIS_PORT" "$1" "$2" "$3"' "$build" "$checks" "$depth" "$rounds"
