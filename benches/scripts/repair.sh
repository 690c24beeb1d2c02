#!/usr/bin/env bash
# Repair of about a million counters of which 1% differ: a fresh 3-node
# cluster of cluster.toml (data under a temporary directory, a 1 s hint
# window so that hints for a node away longer are dropped), loaded with
# tally-bench over COUNTERS keys (three adds a key on average: about 95%
# of them written); then n3 is killed, 1% of COUNTERS more adds are made,
# n3 restarts, and `tally --node n3 repair` brings it back. Prints the
# repair's summary (cells and bytes moved, seconds), then a second repair,
# which must move nothing. KEEP=1 keeps the data directory and logs.
#
# Usage: repair.sh TALLYD TALLY TALLY_BENCH [COUNTERS]
set -euo pipefail
tallyd=$(realpath "$1"); tally=$(realpath "$2"); bench=$(realpath "$3"); counters=${4:-1000000}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-repair.XXXXXX)
# The hint window goes with the cluster table, before the first node.
sed -e "s#data/#$dir/#" -e '0,/^\[\[node\]\]/s//[cluster.hints]\nwindow_ms = 1000\n\n[[node]]/' \
    "$root/cluster.toml" > "$dir/cluster.toml"
declare -A pids=()
stop() { for n in "${!pids[@]}"; do kill -INT "${pids[$n]}" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'stop; [ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"' EXIT
start() { "$tallyd" run --config "$dir/cluster.toml" --node "$1" --threads 1 >> "$dir/$1.log" 2>&1 & pids[$1]=$!; }
up() { # waits until `tally status` counts every node up, and a little more for every view
    for _ in $(seq 100); do
        [ "$("$tally" --config "$dir/cluster.toml" status 2>/dev/null | grep -c ' UN ')" = 3 ] && sleep 2 && return 0
        sleep 0.2
    done
    echo "the cluster did not come up: see $dir" >&2; exit 1
}
"$tallyd" certs --config "$dir/cluster.toml" > /dev/null
for n in n1 n2 n3; do start $n; done
up
echo "loading $((counters * 3)) adds over $counters counters"
"$bench" --config "$dir/cluster.toml" --keys "$counters" --ops $((counters * 3)) --prefix r --concurrency 128 | tail -1
kill -9 "${pids[n3]}"; wait "${pids[n3]}" 2>/dev/null || true; unset 'pids[n3]'
sleep 2
echo "n3 down: $((counters / 100)) adds it misses"
"$bench" --config "$dir/cluster.toml" --keys "$counters" --ops $((counters / 100)) --prefix r --concurrency 128 --seed 7 | tail -1
sleep 2 # past the hint window: the hints for n3 are dropped
start n3
up
"$tally" --config "$dir/cluster.toml" status | grep -E 'needs repair' || true
"$tally" --config "$dir/cluster.toml" --node n3 repair
"$tally" --config "$dir/cluster.toml" --node n3 repair
