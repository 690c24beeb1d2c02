#!/usr/bin/env bash
# Pages of a wide CQL partition on the 3-node cluster of cluster.toml
# (`tallyd up`, one thread per node): tally-bench --protocol cql
# --cql-statement wide-page fills one partition of N rows (3N INSERTs of
# random rows: about 95% of them), then reads pages of 100 rows from a
# random row on (`SELECT ... WHERE pk = ? AND ck >= ? LIMIT 100`, 50 in
# flight), for N = 1,600, 20,000 and 100,000. With OLD_TALLYD (a build
# that reads a partition whole, at most 10,000 cells), its cluster runs
# the 1,600-row case in each round too, alternated. Prints every round
# (pages per second, with p99), then the medians.
#
# Usage: cql-wide.sh TALLYD TALLY_BENCH [ROUNDS] [OLD_TALLYD]
set -euo pipefail
new=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-3}
old=${4:+$(realpath "$4")}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cql-wide.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

config="$dir/three/cluster.toml"
run() { # ROWS READ_RATIO OPS: prints "pages/s p99"
    "$bench" --config "$config" --protocol cql --cql-statement wide-page --keys "$1" \
        --read-ratio "$2" --ops "$3" --concurrency 50 --json 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.2f" % (r["ops_per_s"], r["latency_ms"]["p99"]))'
}
measure() { # BUILD ROWS...: fills and reads each partition on a fresh cluster
    local build=$1; shift
    tallyd=$build; start_three
    for rows in "$@"; do
        run "$rows" 0 $((3 * rows)) > /dev/null
        r=$(run "$rows" 1 5000)
        echo "round $round $label $rows rows: ${r% *} pages/s (p99 ${r#* } ms)"
        runs+=("$label-$rows ${r% *}")
    done
    stop_pid
}
runs=()
for round in $(seq "$rounds"); do
    label=new; measure "$new" 1600 20000 100000
    if [ -n "$old" ]; then label=old; measure "$old" 1600; fi
done
printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
meds = {k: statistics.median(float(r[1]) for r in rows if r[0] == k) for k in dict.fromkeys(r[0] for r in rows)}
print('median pages/s: ' + ', '.join(f'{k} {v:.0f}' for k, v in meds.items()))
if 'old-1600' in meds:
    print(f\"1,600 rows, sliced/whole: {meds['new-1600'] / meds['old-1600']:.2f}x\")"
