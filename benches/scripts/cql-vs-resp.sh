#!/usr/bin/env bash
# CQL against RESP on the same cluster: a prepared `UPDATE
# tally_bench.counters SET c = c + ? WHERE pk = ?` through tally-bench
# --protocol cql (token-aware, 50 in flight) alternated with redis-benchmark
# -c 50 INCRBY through n1, on 10,000 counters each, in one run of the
# 3-node cluster of cluster.toml (or node 1 alone with `one`); then
# scylla-bench's counter_update and counter_read through tally-bench.
# Prints every round, then the medians and CQL/RESP.
#
# Usage: cql-vs-resp.sh TALLYD TALLY_BENCH [ROUNDS] [three|one]
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-5}; size=${4:-three}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cql.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

"start_$size"
config="$dir/$size/cluster.toml"
ops=150000
cql() {
    "$bench" --config "$config" --protocol cql --cql-statement "$1" --ops "$ops" \
        --concurrency 50 --keys 10000 --json 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f" % (r["ops_per_s"], r["latency_ms"]["p99"]))'
}
resp() {
    redis-benchmark -p 7301 -c 50 -n "$ops" -r 10000 -q INCRBY 'k:__rand_int__' 1 2>/dev/null \
        | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}
runs=()
for round in $(seq "$rounds"); do
    c=$(cql add); r=$(resp)
    echo "round $round: cql add ${c% *}/s (p99 ${c#* } ms), resp INCRBY $r/s"
    runs+=("cql ${c% *}" "resp $r")
done
printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda s: statistics.median(float(r[1]) for r in rows if r[0] == s)
print(f'median: resp INCRBY {med(\"resp\"):.0f}/s, cql add {med(\"cql\"):.0f}/s ({med(\"cql\") / med(\"resp\"):.2f}x)')"
for statement in counter-update counter-read; do
    s=$(cql "$statement")
    echo "$statement: ${s% *}/s, p99 ${s#* } ms"
done
stop_pid
