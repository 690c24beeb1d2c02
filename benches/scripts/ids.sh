#!/usr/bin/env bash
# Adds with operation ids against plain adds, alternated in one run: for
# each round a fresh 3-node cluster from cluster.toml (data under a
# temporary directory), then tally-bench --cl quorum --concurrency 128
# --duration 10 --verify, uniform and hot, each without and with
# --exactly-once. Prints one line per run and, per workload, the median
# ratio of ids to plain.
#
# Usage: ids.sh TALLYD TALLY_BENCH [ROUNDS]
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-ids.XXXXXX)
up=""
trap '[ -n "$up" ] && { kill "$up" 2>/dev/null; wait "$up" 2>/dev/null; }; rm -rf "$dir"' EXIT
results=()
for round in $(seq "$rounds"); do
    rm -rf "$dir/data"; mkdir -p "$dir/data"
    sed -e "s#data/#$dir/data/#" "$root/cluster.toml" > "$dir/data/cluster.toml"
    "$tallyd" up --config "$dir/data/cluster.toml" > "$dir/up.log" 2>&1 &
    up=$!
    sleep 4
    for workload in uniform hot; do
        for mode in plain ids; do
            flag=""; [ "$mode" = ids ] && flag="--exactly-once"
            line=$("$bench" --config "$dir/data/cluster.toml" --cl quorum --concurrency 128 \
                       --duration 10 --workload "$workload" $flag --verify 2>&1 \
                   | awk '/throughput/ { t = $2 } /latency ms/ { p = $8 } /verify/ { v = $7 } END { print t, p, v }')
            echo "round $round $workload $mode: $line (adds/s, p99 ms, verify)"
            results+=("$workload $mode $line")
        done
    done
    kill -INT "$up"; wait "$up" 2>/dev/null || true; up=""
done
printf '%s\n' "${results[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
for w in ('uniform', 'hot'):
    plain = [float(r[2]) for r in rows if r[0] == w and r[1] == 'plain']
    ids = [float(r[2]) for r in rows if r[0] == w and r[1] == 'ids']
    ratios = [i / p for p, i in zip(plain, ids)]
    print(f'median {w}: plain {statistics.median(plain):.0f}, ids {statistics.median(ids):.0f} adds/s, '
          f'ids/plain {statistics.median(ratios):.2f} (target >= 0.9)')"
