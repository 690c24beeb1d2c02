#!/usr/bin/env bash
# CPU time per add: starts a fresh 3-node cluster from cluster.toml (data
# under a temporary directory), runs tally-bench for a fixed number of adds,
# and prints throughput, p99, the nodes' CPU per add and tally-bench's.
# Alternate two builds in one run to compare them on this noisy machine:
#
#   benches/scripts/cpu-per-add.sh old/tallyd old/tally-bench
#   benches/scripts/cpu-per-add.sh target/release/tallyd target/release/tally-bench
#
# Usage: cpu-per-add.sh TALLYD TALLY_BENCH [WORKLOAD] [ADDS] [TALLY-BENCH ARGS...]
# e.g. `... uniform 300000 --keys 3` for one record per batch on each leader.
# TALLY_TABLES (TOML) is added to the config, e.g. "[cluster.client_tls]".
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); workload=${3:-uniform}; adds=${4:-150000}
shift $(( $# < 4 ? $# : 4 ))
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-cpu.XXXXXX)
sed -e "s#data/#$dir/#" "$root/cluster.toml" > "$dir/cluster.toml"
printf '%b\n' "${TALLY_TABLES:-}" >> "$dir/cluster.toml"
"$tallyd" up --config "$dir/cluster.toml" > "$dir/up.log" 2>&1 &
up=$!
trap 'kill $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$dir"' EXIT
sleep 4
nodes=$(pgrep -P $up | tr '\n' ' ')
[ -n "$nodes" ] || { echo "the cluster did not start: $dir/up.log" >&2; cat "$dir/up.log" >&2; exit 1; }
ticks() { local t=0 u s; for p in $nodes; do read -r u s < <(cut -d' ' -f14,15 /proc/$p/stat); t=$((t + u + s)); done; echo $t; }
t0=$(ticks)
TIMEFORMAT='BENCHCPU %U %S'
out=$( { time "$bench" --config "$dir/cluster.toml" --cl quorum \
    --concurrency 128 --ops "$adds" --workload "$workload" "$@"; } 2>&1 )
t1=$(ticks)
hz=$(getconf CLK_TCK)
echo "$out" | awk -v adds="$adds" -v node=$((t1 - t0)) -v hz="$hz" '
    /throughput/ { rate = $2 }
    /latency ms/ { p99 = $8 }
    /BENCHCPU/   { bench = $2 + $3 }
    END { printf "%s adds/s  p99 %s ms  node cpu %.1f us/add  bench cpu %.1f us/add\n",
                 rate, p99, node / hz * 1e6 / adds, bench * 1e6 / adds }'
