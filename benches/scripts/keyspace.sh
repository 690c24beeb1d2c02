#!/usr/bin/env bash
# Scans, flushes and scripts on the 3-node cluster of cluster.toml
# (replication factor 3, one thread per node, as `tallyd up` runs it):
#   1. writes COUNTERS counters (k:0 .. k:N-1, redis-benchmark pipelines),
#   2. SCAN of all of them through redis-py's scan_iter(count=1000) and
#      through `tally scan` (keys/s, each checked to list every key once),
#   3. FLUSHALL (seconds to the answer, and until every node dropped them),
#   4. EVALSHA of Python limits' fixed-window script (incr_expire.lua) with
#      redis-benchmark -c 50 -r 100000 on one node (replication factor 1)
#      and on the three, each against redis-server with --appendonly yes
#      --appendfsync always, alternated ROUNDS times.
#
# Usage: keyspace.sh TALLYD [COUNTERS] [ROUNDS]   (needs redis-server,
# redis-benchmark, and redis-py on PYTHONPATH: target/pyredis after the tests)
set -euo pipefail
tallyd=$(realpath "$1"); counters=${2:-1000000}; rounds=${3:-3}
tally=$(dirname "$tallyd")/tally
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=${PYTHONPATH:-$root/target/pyredis}
dir=$(mktemp -d /tmp/tally-keyspace.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
redis_port=7399
script="local current
local amount = tonumber(ARGV[2])
current = redis.call(\"incrby\", KEYS[1], amount)

if tonumber(current) == amount then
    redis.call(\"expire\", KEYS[1], ARGV[1])
end

return current
"

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

# evalsha PORT: requests per second of the fixed-window script.
evalsha() {
    local sha; sha=$(redis-cli -p "$1" SCRIPT LOAD "$script")
    local args=(-p "$1" -c 50 -r 100000 -q EVALSHA "$sha" 1 'rl:__rand_int__' 60 1)
    redis-benchmark -n 20000 "${args[@]}" > /dev/null 2>&1
    redis-benchmark -n 100000 "${args[@]}" 2>/dev/null \
        | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}

echo "== $counters counters on 3 nodes"
start_three
t0=$(date +%s.%N)
python3 - "$counters" <<'EOF'
import sys, redis
n = int(sys.argv[1])
r = redis.Redis(port=7301, protocol=2)
for start in range(0, n, 10000):
    p = r.pipeline(transaction=False)
    for i in range(start, min(n, start + 10000)):
        p.incr(f"k:{i}")
    p.execute()
EOF
echo "written in $(echo "$(date +%s.%N) - $t0" | bc) s"
python3 - "$counters" <<'EOF'
import sys, time, redis
n = int(sys.argv[1])
r = redis.Redis(port=7301, protocol=2)
t = time.time()
seen = list(r.scan_iter(count=1000))
dt = time.time() - t
ours = [k for k in seen if k.startswith(b"k:")]
assert len(seen) == len(set(seen)) and len(ours) == n, (len(seen), len(set(seen)), len(ours))
print(f"SCAN (redis-py scan_iter, COUNT 1000): {len(seen)} keys in {dt:.1f} s: {len(seen) / dt:.0f} keys/s")
EOF
t0=$(date +%s.%N)
listed=$("$tally" --config "$dir/three/cluster.toml" scan | wc -l)
dt=$(echo "$(date +%s.%N) - $t0" | bc)
echo "tally scan: $listed keys in $dt s: $(echo "$listed / $dt" | bc) keys/s"
t0=$(date +%s.%N)
redis-cli -p 7301 FLUSHALL > /dev/null
echo "FLUSHALL answered in $(echo "$(date +%s.%N) - $t0" | bc) s; DBSIZE after: $(redis-cli -p 7301 DBSIZE)"
for _ in $(seq 600); do
    [ "$(grep -c 'flushed generations collected' "$dir/three/up.log")" -ge 3 ] && break
    sleep 0.1
done
echo "every node dropped the flushed cells $(echo "$(date +%s.%N) - $t0" | bc) s after the FLUSHALL"
stop_pid

echo "== EVALSHA of limits' fixed-window script, redis-benchmark -c 50"
vs_redis "$rounds" "EVALSHA (one node, RF 1)" evalsha start_one
vs_redis "$rounds" "EVALSHA (three nodes, RF 3)" evalsha
