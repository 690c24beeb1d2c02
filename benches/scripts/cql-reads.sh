#!/usr/bin/env bash
# CQL point reads on the 3-node cluster of cluster.toml (`tallyd up`, one
# thread per node), two builds alternated on fresh clusters: tally-bench
# --protocol cql (50 in flight, 10,000 keys) reads a regular table's rows
# by partition key (`insert --read-ratio 1`: SELECT v ... WHERE pk = ?,
# no clustering columns) and scylla-bench's counter rows from a
# clustering key on (`counter-read`), each after writing them. Prints
# every round (reads per second, with p99), then the medians and B/A.
#
# Usage: cql-reads.sh TALLYD_A TALLYD_B TALLY_BENCH [ROUNDS]
set -euo pipefail
a=$(realpath "$1"); b=$(realpath "$2"); bench=$(realpath "$3"); rounds=${4:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cql-reads.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

config="$dir/three/cluster.toml"
run() { # STATEMENT READ_RATIO: prints "ops/s p99"
    "$bench" --config "$config" --protocol cql --cql-statement "$1" --keys 10000 \
        --read-ratio "$2" --ops 20000 --concurrency 50 --json 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f" % (r["ops_per_s"], r["latency_ms"]["p99"]))'
}
runs=()
for round in $(seq "$rounds"); do
    for label in A B; do
        tallyd=$a; [ "$label" = B ] && tallyd=$b
        start_three
        run insert 0 > /dev/null; r=$(run insert 1)
        run counter-update 0 > /dev/null; c=$(run counter-read 0)
        echo "round $round $label: SELECT by pk ${r% *}/s (p99 ${r#* } ms), counter_read ${c% *}/s (p99 ${c#* } ms)"
        runs+=("$label-pk ${r% *}" "$label-ck ${c% *}")
        stop_pid
    done
done
printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda k: statistics.median(float(r[1]) for r in rows if r[0] == k)
for what, name in (('pk', 'SELECT by pk'), ('ck', 'counter_read')):
    print(f'median {name}: A {med(\"A-\" + what):.0f}/s, B {med(\"B-\" + what):.0f}/s, B/A {med(\"B-\" + what) / med(\"A-\" + what):.2f}x')"
