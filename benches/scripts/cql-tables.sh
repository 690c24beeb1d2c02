#!/usr/bin/env bash
# CQL regular tables against RESP strings on the same 3-node cluster of
# cluster.toml (`tallyd up`, one thread per node): a prepared `INSERT
# INTO tally_bench.rows (pk, v) VALUES (?, ?)` (a 3-byte text) through
# tally-bench --protocol cql (token-aware, 50 in flight, 10,000 keys)
# alternated with redis-benchmark -c 50 SET of a 3-byte string through
# n1 (an agreed write in Tally); then `INSERT ... IF NOT EXISTS`, each of
# a new key (a lightweight transaction). Prints every round with its
# p99, then the medians and CQL/RESP.
#
# Usage: cql-tables.sh TALLYD TALLY_BENCH [ROUNDS]
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cql-tables.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

start_three
config="$dir/three/cluster.toml"
ops=60000
cql() {
    "$bench" --config "$config" --protocol cql --cql-statement "$1" --ops "$2" \
        --concurrency 50 --keys 10000 --json 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f" % (r["ops_per_s"], r["latency_ms"]["p99"]))'
}
resp() {
    redis-benchmark -p 7301 -c 50 -n "$ops" -r 10000 --precision 2 SET 'k:__rand_int__' xxx 2>/dev/null \
        | tr '\r' '\n' | python3 -c '
import re, sys
text = sys.stdin.read()
rate = re.findall(r"throughput summary: ([0-9.]+) requests per second", text)[-1]
p99 = re.search(r"latency summary.*?\n.*?\n\s*[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)", text, re.S).group(1)
print("%.0f %s" % (float(rate), p99))'
}
runs=()
for round in $(seq "$rounds"); do
    c=$(cql insert "$ops"); r=$(resp)
    echo "round $round: cql INSERT ${c% *}/s (p99 ${c#* } ms), resp SET ${r% *}/s (p99 ${r#* } ms)"
    runs+=("cql ${c% *}" "resp ${r% *}")
done
printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda s: statistics.median(float(r[1]) for r in rows if r[0] == s)
print(f'median: resp SET {med(\"resp\"):.0f}/s, cql INSERT {med(\"cql\"):.0f}/s ({med(\"cql\") / med(\"resp\"):.2f}x)')"
for round in $(seq "$rounds"); do
    s=$(cql insert-if-not-exists 20000)
    echo "round $round: INSERT ... IF NOT EXISTS ${s% *}/s, p99 ${s#* } ms"
done
stop_pid
