#!/usr/bin/env bash
# Instructions per request of a whole 3-node cluster (cluster.toml,
# replication factor 3, `--threads 1`), every node under callgrind: the
# replication round and the replicas' decode and apply, which the one-node
# instructions.sh does not run. Per load, redis-benchmark -c 50 through n1
# once to warm up; the counters of all three nodes are zeroed, it runs
# again, and the sum of the three nodes' instructions is divided by its
# requests. Heartbeats are every 5 s (failure timeout 60 s) so that
# periodic work, which valgrind's slowdown would weigh fifty times its
# share, stays out of the count. Repeats agree within about 1.5%.
# Usage: instructions3.sh TALLYD [LABEL]   (needs valgrind and redis-benchmark)
set -euo pipefail
tallyd=$(realpath "$1"); label=${2:-$(basename "$(dirname "$tallyd")")}
root=$(cd "$(dirname "$0")/../.." && pwd)
for tool in valgrind callgrind_control redis-benchmark redis-cli; do
    command -v "$tool" > /dev/null || { echo "instructions3.sh needs $tool" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/tally-instructions3.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT

sed -e "s#data/#$dir/#" -e 's/^heartbeat_interval_ms = .*/heartbeat_interval_ms = 5000/' \
    -e 's/^failure_timeout_ms = .*/failure_timeout_ms = 60000/' "$root/cluster.toml" > "$dir/cluster.toml"
port=$(sed -n 's/^resp *= *"127.0.0.1:\([0-9]*\)".*/\1/p' "$dir/cluster.toml" | head -1)
"$tallyd" certs --config "$dir/cluster.toml" > "$dir/certs.log" 2>&1
for n in 1 2 3; do
    valgrind --tool=callgrind --callgrind-out-file="$dir/cg$n.out" \
        "$tallyd" run --config "$dir/cluster.toml" --node "n$n" --threads 1 > "$dir/run$n.log" 2>&1 &
    pids+=($!)
done
for _ in $(seq 600); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.5
done
[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] \
    || { echo "the cluster did not start:" >&2; cat "$dir"/run*.log >&2; exit 1; }
# The others see each other up (a first heartbeat each way).
sleep 15

# count NAME REQUESTS ARGS...: prints the cluster's instructions per request of one run.
count() {
    local name=$1 n=$2; shift 2
    redis-benchmark -p "$port" -c 50 -n $(( n / 4 )) -q "$@" > /dev/null 2>&1
    for p in "${pids[@]}"; do callgrind_control -z "$p" > /dev/null; done
    redis-benchmark -p "$port" -c 50 -n "$n" -q "$@" > /dev/null 2>&1
    local total=0 i dump t
    for i in 1 2 3; do
        callgrind_control -d "$name" "${pids[$((i - 1))]}" > /dev/null
        dump=""
        for _ in $(seq 100); do
            dump=$(grep -l "^desc: Trigger: .*$name" "$dir"/cg$i.out.* 2>/dev/null | head -1 || true)
            [ -n "$dump" ] && grep -q '^totals:' "$dump" && break
            sleep 0.2
        done
        t=$(awk '/^totals:/ { print $2 }' "$dump")
        total=$(( total + t ))
    done
    echo "$label $name: $(( total / n )) instructions per request (3 nodes)"
}
count P1-hot 20000 -P 1 -t incr
count P16-uniform 100000 -P 16 -r 100000 INCRBY 'k:__rand_int__' 1
count P1-uniform 20000 -P 1 -r 100000 INCRBY 'k:__rand_int__' 1
