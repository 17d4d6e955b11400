#!/bin/sh
# cluster.sh - a Redis Cluster of three masters (private, on free 127.0.0.1 ports), then the
# conformance scenarios against it: each pool lives in its own slot ({pool} hash tag), the
# registry and the task graph in theirs. Usage: cluster.sh RUNNER SCENARIO...
# Fails when redis-server or redis-cli is missing or cluster mode cannot start.
set -u
runner=$1; shift
command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 ||
    { echo "cluster.sh: FAIL: redis-server/redis-cli not installed (scripts/deps.sh)"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cluster.XXXXXX")
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    sleep 0.2
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
base=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 ))
nodes=""
for i in 0 1 2; do
    port=$((base + i))
    mkdir -p "$dir/$port"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/$port" --save '' --appendonly no \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --logfile "$dir/$port/redis.log" &
    pids="$pids $!"
    nodes="$nodes 127.0.0.1:$port"
done
for n in $nodes; do
    for i in $(seq 1 50); do redis-cli -p "${n#*:}" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create $nodes --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log"; echo "cluster.sh: FAIL: cluster mode did not start"; exit 1; }
for i in $(seq 1 100); do
    redis-cli -p "$base" cluster info 2>/dev/null | grep -q cluster_state:ok && break
    sleep 0.1
done
list=$(echo $nodes | tr ' ' ',')
"$runner" --redis "$list" "$@"
