#!/bin/sh
# cluster.sh - a Redis Cluster of three masters (private, on free 127.0.0.1 ports), then the
# conformance scenarios against it: each pool lives in its own slot ({pool} hash tag), the
# registry and the task graph in theirs. Usage: cluster.sh RUNNER SCENARIO...
# The node timeout is long (30 s): with 2 s a node stalled that long on a loaded machine
# was voted failing by the other two, and the cluster answered CLUSTERDOWN for 4 s and more
# (failure detection is not what is tested here).
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
# Six ports the kernel says are free right now (three clients, three cluster buses), held
# open together so they differ; random ports collide with the ephemeral range.
ports=$(python3 -c 'import socket
ss=[socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
nodes=""
i=0
for port in $ports; do
    [ $i -ge 3 ] && break
    bus=$(echo $ports | cut -d' ' -f$((i + 4)))
    mkdir -p "$dir/$port"
    redis-server --bind 127.0.0.1 --port "$port" --cluster-port "$bus" --dir "$dir/$port" \
        --save '' --appendonly no --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 30000 --logfile "$dir/$port/redis.log" &
    pids="$pids $!"
    nodes="$nodes 127.0.0.1:$port"
    i=$((i + 1))
done
for n in $nodes; do
    up=no
    for i in $(seq 1 100); do redis-cli -p "${n#*:}" ping >/dev/null 2>&1 && up=yes && break; sleep 0.1; done
    [ $up = yes ] || { cat "$dir/${n#*:}/redis.log"; echo "cluster.sh: FAIL: node $n did not start"; exit 1; }
done
redis-cli --cluster create $nodes --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 ||
    { cat "$dir/create.log"; echo "cluster.sh: FAIL: cluster mode did not start"; exit 1; }
# Ready is every node saying so: the nodes learn the slot table by gossip, each on its own
# tick, so one node's cluster_state:ok does not make the others answer (CLUSTERDOWN).
# Bounded by count (600 looks, 0.1 s apart), not by how fast a loaded machine gets there.
ready() {
    info=$(redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r')
    echo "$info" | grep -qx cluster_state:ok && echo "$info" | grep -qx cluster_slots_ok:16384 &&
        echo "$info" | grep -qx cluster_known_nodes:3
}
for n in $nodes; do
    up=no
    for i in $(seq 1 600); do ready "${n#*:}" && up=yes && break; sleep 0.1; done
    [ $up = yes ] || { redis-cli -p "${n#*:}" cluster info; echo "cluster.sh: FAIL: node $n not ready"; exit 1; }
done
list=$(echo $nodes | tr ' ' ',')
"$runner" --redis "$list" "$@"
