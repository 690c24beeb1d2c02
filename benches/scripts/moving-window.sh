#!/usr/bin/env bash
# EVALSHA of Python limits' moving-window script (acquire_moving_window.lua:
# LINDEX, then LPUSH, LTRIM and EXPIRE of a list per key) with
# redis-benchmark -c 50 -r 100000, on the 3-node cluster of cluster.toml
# (replication factor 3, one thread per node, as `tallyd up` runs it)
# against redis-server --appendonly yes --appendfsync always, alternated
# ROUNDS times, a fresh cluster and server each round. The timestamp is
# fixed (redis-benchmark cannot vary it), so every key's first hits push.
#
# Usage: moving-window.sh TALLYD [ROUNDS] [REQUESTS]   (needs redis-server
# and redis-benchmark)
set -euo pipefail
tallyd=$(realpath "$1"); rounds=${2:-3}; requests=${3:-50000}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-moving.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
redis_port=7399
script="local timestamp = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local expiry = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])
if amount > limit then
    return false
end
local entry = redis.call('lindex', KEYS[1], limit - amount)
if entry and tonumber(entry) >= timestamp - expiry then
    return false
end
local entries = {}
for i = 1, amount do
    entries[i] = timestamp
end
for i=1,#entries,5000 do
    redis.call('lpush', KEYS[1], unpack(entries, i, math.min(i+4999, #entries)))
end
redis.call('ltrim', KEYS[1], 0, limit - 1)
redis.call('expire', KEYS[1], expiry)
return true
"

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

# evalsha PORT: requests per second of the moving-window script.
evalsha() {
    local sha; sha=$(redis-cli -p "$1" SCRIPT LOAD "$script")
    local args=(-p "$1" -c 50 -r 100000 -q EVALSHA "$sha" 1 'mw:__rand_int__' 1700000000.5 10 60 1)
    redis-benchmark -n 5000 "${args[@]}" > /dev/null 2>&1
    redis-benchmark -n "$requests" "${args[@]}" 2>/dev/null \
        | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}

vs_redis "$rounds" "EVALSHA (moving window)" evalsha
