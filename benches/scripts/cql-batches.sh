#!/usr/bin/env bash
# CQL batches on the 3-node cluster of cluster.toml (`tallyd up`, one
# thread per node): tally-bench --protocol cql (token-aware, 50 in
# flight, 10,000 keys) alternating a logged batch of three INSERTs of
# three partitions (through the batch log: its entry written at QUORUM
# first, deleted after), the same batch unlogged, and single INSERTs.
# Prints every round (batches or statements per second, with p99), then
# the medians, in rows per second, and logged/unlogged.
#
# Usage: cql-batches.sh TALLYD TALLY_BENCH [ROUNDS]
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cql-batches.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

start_three
config="$dir/three/cluster.toml"
ops=20000
cql() {
    "$bench" --config "$config" --protocol cql --cql-statement "$1" --ops "$ops" \
        --concurrency 50 --keys 10000 --json 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f" % (r["ops_per_s"], r["latency_ms"]["p99"]))'
}
runs=()
for round in $(seq "$rounds"); do
    l=$(cql logged-batch); u=$(cql unlogged-batch); i=$(cql insert)
    echo "round $round: logged ${l% *} batches/s (p99 ${l#* } ms), unlogged ${u% *}/s (p99 ${u#* } ms), INSERT ${i% *}/s (p99 ${i#* } ms)"
    runs+=("logged ${l% *}" "unlogged ${u% *}" "insert ${i% *}")
done
printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda s: statistics.median(float(r[1]) for r in rows if r[0] == s)
lo, un, ins = med('logged'), med('unlogged'), med('insert')
print(f'median rows/s: logged batches {3 * lo:.0f}, unlogged {3 * un:.0f}, single INSERTs {ins:.0f}; logged/unlogged {lo / un:.2f}x')"
stop_pid
