#!/usr/bin/env bash
# Locks taken on distinct keys: `SET k:__rand_int__ v NX PX 30000` (each
# key new, so every SET is one uncontended agreement round) through n1 of
# the 3-node cluster of cluster.toml, redis-benchmark -c 50, alternated in
# one run with redis-server of the same durability (appendonly yes,
# appendfsync always). Prints every round, then the medians and
# Tally/Redis.
#
# Usage: set-nx.sh TALLYD [ROUNDS]   (needs redis-server and redis-benchmark)
set -euo pipefail
tallyd=$(realpath "$1"); rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-set-nx.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
redis_port=7399

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

# set_nx PORT: requests per second of one run of 60,000 distinct locks.
set_nx() {
    redis-benchmark -p "$1" -c 50 -n 60000 -r 100000000 -q SET 'k:__rand_int__' v NX PX 30000 2>/dev/null \
        | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}

vs_redis "$rounds" "SET NX PX" set_nx
