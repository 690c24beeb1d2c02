#!/usr/bin/env bash
# Throughput while a node joins: a fresh 3-node cluster of cluster.toml
# (each node --threads 1, data under a temporary directory) plus an n4
# with `join = true`, loaded with ADDS adds over KEYS counters; then
# tally-bench runs 45 s of uniform adds at 128 in flight and n4 joins
# from second 10 (`tallyd run --join`). Prints tally-bench's line of every
# second, when the join began and ended, and the medians of the seconds
# before it and during it, and their ratio. KEEP=1 keeps the data.
#
# Usage: join.sh TALLYD TALLY TALLY_BENCH [KEYS] [ADDS]
set -euo pipefail
tallyd=$(realpath "$1"); tally=$(realpath "$2"); bench=$(realpath "$3")
keys=${4:-200000}; adds=${5:-400000}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-join.XXXXXX)
sed -e "s#data/#$dir/#" "$root/cluster.toml" > "$dir/cluster.toml"
cat >> "$dir/cluster.toml" <<TOML

[[node]]
id = "n4"
peer = "127.0.0.1:7104"
client = "127.0.0.1:7204"
resp = "127.0.0.1:7304"
data_dir = "$dir/n4"
join = true
TOML
declare -A pids=()
stop() { for n in "${!pids[@]}"; do kill -INT "${pids[$n]}" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'stop; [ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"' EXIT
start() { "$tallyd" run --config "$dir/cluster.toml" --node "$1" --threads 1 "${@:2}" >> "$dir/$1.log" 2>&1 & pids[$1]=$!; }
state() { "$tally" --config "$dir/cluster.toml" --node n1 status --json 2>/dev/null \
    | python3 -c 'import json,sys; print(next(n["status"] for n in json.load(sys.stdin)["nodes"] if n["id"] == sys.argv[1]))' "$1" 2>/dev/null || true; }
"$tallyd" certs --config "$dir/cluster.toml" > /dev/null
for n in n1 n2 n3; do start $n; done
for _ in $(seq 100); do [ "$(state n3)" = UN ] && [ "$(state n1)" = UN ] && break; sleep 0.2; done
sleep 2
echo "loading $adds adds over $keys counters"
"$bench" --config "$dir/cluster.toml" --keys "$keys" --ops "$adds" --prefix j --concurrency 128 | tail -1
t0=$(date +%s.%N)
"$bench" --config "$dir/cluster.toml" --keys "$keys" --duration 45 --prefix j --concurrency 128 \
    2> "$dir/bench.err" > "$dir/bench.out" &
bench_pid=$!
sleep 10
began=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0))")
start n4 --join
while [ "$(state n4)" != UN ]; do sleep 0.5; done
ended=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0))")
wait "$bench_pid"
grep -E '^\[' "$dir/bench.err" || true
echo "n4 joined from second $began to second $ended"
grep -E 'synced' "$dir/n4.log" | tail -1 | sed 's/.*summary=/sync: /' || true
python3 - "$dir/bench.err" "$began" "$ended" <<'PY'
import re, statistics, sys
path, began, ended = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = {}
for line in open(path):
    m = re.match(r"\[\s*(\d+)s\]\s+(\d+) ops/s", line)
    if m:
        rate[int(m.group(1))] = int(m.group(2))
steady = [v for s, v in rate.items() if 2 <= s < began]
during = [v for s, v in rate.items() if began < s <= max(ended, began + 1)]
a, b = statistics.median(steady), statistics.median(during)
print(f"steady (s 2-{began - 1}): median {a:.0f} adds/s; during the join (s {began + 1}-{max(ended, began + 1)}): median {b:.0f} adds/s; ratio {b / a:.2f}")
PY
