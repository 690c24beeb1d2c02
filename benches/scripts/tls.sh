#!/usr/bin/env bash
# What TLS on the client ports costs: tally-bench at 128 in flight on a
# fresh 3-node cluster (`tallyd up`, one thread per node), alternating
# plain TCP and `[cluster.client_tls]` round by round, each round a fixed
# number of uniform adds (see cpu-per-add.sh). Prints each run and the
# medians.
#
# Usage: tls.sh TALLYD TALLY_BENCH [ROUNDS] [ADDS]
set -euo pipefail
tallyd=$1; bench=$2; rounds=${3:-5}; adds=${4:-300000}
here=$(cd "$(dirname "$0")" && pwd)
plain=(); tls=()
for i in $(seq "$rounds"); do
    p=$(TALLY_TABLES="" "$here/cpu-per-add.sh" "$tallyd" "$bench" uniform "$adds")
    echo "round $i plain: $p"; plain+=("${p%% *}")
    t=$(TALLY_TABLES="[cluster.client_tls]" "$here/cpu-per-add.sh" "$tallyd" "$bench" uniform "$adds")
    echo "round $i tls:   $t"; tls+=("${t%% *}")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mp=$(median "${plain[@]}"); mt=$(median "${tls[@]}")
awk -v p="$mp" -v t="$mt" 'BEGIN { printf "median adds/s: plain %.0f, tls %.0f: tls/plain %.3f\n", p, t, t / p }'
