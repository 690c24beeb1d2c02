#!/usr/bin/env bash
# Instructions per request of one node, counted by callgrind: a figure the
# machine's noise does not move (the same binary and load give the same
# count within about 0.5%, whatever else the cores are doing), for
# comparing two builds when timed runs swing too much. Starts cluster.toml's
# first node alone (replication factor 1, `--threads 1`) under
# `valgrind --tool=callgrind`, and per load runs redis-benchmark -c 50 once
# to warm up, zeroes the counters, runs it again and divides the
# instructions of that run by its requests:
#   P1-hot       -t incr, one request at a time per connection
#   P16-uniform  INCRBY k:__rand_int__ 1 over 100,000 keys, pipelines of 16
#   P1-uniform, P16-hot likewise
# Usage: instructions.sh TALLYD [LABEL]   (needs valgrind and redis-benchmark)
# Compare builds by running it for each: ratios of the counts, not seconds.
set -euo pipefail
tallyd=$(realpath "$1"); label=${2:-$(basename "$(dirname "$tallyd")")}
root=$(cd "$(dirname "$0")/../.." && pwd)
for tool in valgrind callgrind_control redis-benchmark redis-cli; do
    command -v "$tool" > /dev/null || { echo "instructions.sh needs $tool" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/tally-instructions.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

awk '/^\[\[node\]\]/ { n++ } n < 2' "$root/cluster.toml" \
    | sed -e "s#data/#$dir/#" -e 's/^replication_factor = .*/replication_factor = 1/' \
    > "$dir/cluster.toml"
port=$(sed -n 's/^resp *= *"127.0.0.1:\([0-9]*\)".*/\1/p' "$dir/cluster.toml" | head -1)
"$tallyd" certs --config "$dir/cluster.toml" > "$dir/certs.log" 2>&1
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
    "$tallyd" run --config "$dir/cluster.toml" --node n1 --threads 1 > "$dir/run.log" 2>&1 &
pid=$!
# Under valgrind a node starts in seconds, not milliseconds: wait up to 5 minutes.
for _ in $(seq 600); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.5
done
[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] \
    || { echo "the node did not start:" >&2; cat "$dir/run.log" >&2; exit 1; }

# count NAME REQUESTS ARGS...: prints the instructions per request of one run.
count() {
    local name=$1 n=$2; shift 2
    redis-benchmark -p "$port" -c 50 -n $(( n / 4 )) -q "$@" > /dev/null 2>&1
    callgrind_control -z "$pid" > /dev/null
    redis-benchmark -p "$port" -c 50 -n "$n" -q "$@" > /dev/null 2>&1
    callgrind_control -d "$name" "$pid" > /dev/null
    local dump total
    for _ in $(seq 50); do
        dump=$(grep -l "^desc: Trigger: .*$name" "$dir"/cg.out.* 2>/dev/null | head -1 || true)
        [ -n "$dump" ] && grep -q '^totals:' "$dump" && break
        sleep 0.2
    done
    total=$(awk '/^totals:/ { print $2 }' "$dump")
    echo "$label $name: $(( total / n )) instructions per request"
}
count P1-hot 20000 -P 1 -t incr
count P16-uniform 200000 -P 16 -r 100000 INCRBY 'k:__rand_int__' 1
count P1-uniform 20000 -P 1 -r 100000 INCRBY 'k:__rand_int__' 1
count P16-hot 200000 -P 16 -t incr
