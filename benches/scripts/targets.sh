#!/usr/bin/env bash
# The cluster's three throughput targets, measured side by side: for each
# round a fresh 3-node cluster from cluster.toml (data under a temporary
# directory), then
#   1. tally-bench --cl quorum --concurrency 128 --duration 10 --workload uniform
#   2. the same with --workload hot
#   3. redis-benchmark -t incr -c 50 -n 1000000 against node n1's RESP port,
#      then against a redis-server (appendonly yes, appendfsync everysec)
#      that this script starts on a free loopback port, and stops.
# Prints one line per round, then the medians. This machine's speed drifts
# within minutes: compare builds by alternating them, one round each.
#
# Usage: targets.sh TALLYD TALLY_BENCH [ROUNDS]
# Needs redis-server, redis-cli and redis-benchmark (Debian: redis-server,
# redis-tools).
set -euo pipefail
tallyd=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" > /dev/null || { echo "targets.sh needs $tool" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/tally-targets.XXXXXX)
up=""; redis=""
stop() {
    [ -n "$up" ] && { kill "$up" 2>/dev/null || true; wait "$up" 2>/dev/null || true; }
    [ -n "$redis" ] && { kill "$redis" 2>/dev/null || true; wait "$redis" 2>/dev/null || true; }
    up=""; redis=""
}
trap 'stop; rm -rf "$dir"' EXIT

# A free loopback port for Redis.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
resp=$(sed -n 's/^resp *= *"127.0.0.1:\([0-9]*\)".*/\1/p' "$root/cluster.toml" | head -1)

rps() { redis-benchmark -h 127.0.0.1 -p "$1" -t incr -c 50 -n 1000000 -q 2>&1 \
            | tr '\r' '\n' | awk '/requests per second/ { v = $2 } END { print v }'; }
bench_line() { "$bench" --config "$dir/data/cluster.toml" --cl quorum --concurrency 128 \
                   --duration 10 --workload "$1" 2>&1 \
               | awk '/throughput/ { t = $2 } /latency ms/ { p = $8 } END { print t, p }'; }

results=()
for round in $(seq "$rounds"); do
    rm -rf "$dir/data"; mkdir -p "$dir/data" "$dir/redis"
    sed -e "s#data/#$dir/data/#" "$root/cluster.toml" > "$dir/data/cluster.toml"
    "$tallyd" up --config "$dir/data/cluster.toml" > "$dir/up.log" 2>&1 &
    up=$!
    sleep 4
    pgrep -P "$up" > /dev/null || { echo "the cluster did not start:" >&2; cat "$dir/up.log" >&2; exit 1; }
    read -r uniform p99 < <(bench_line uniform)
    read -r hot _ < <(bench_line hot)
    tally_rps=$(rps "$resp")
    redis-server --port "$port" --bind 127.0.0.1 --appendonly yes --appendfsync everysec \
        --dir "$dir/redis" --save "" > "$dir/redis.log" 2>&1 &
    redis=$!
    # (redis-cli exits 0 even when it cannot connect)
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] \
        || { echo "redis-server did not start:" >&2; cat "$dir/redis.log" >&2; exit 1; }
    redis_rps=$(rps "$port")
    stop
    [ -n "$uniform" ] && [ -n "$hot" ] && [ -n "$tally_rps" ] && [ -n "$redis_rps" ] \
        || { echo "round $round: a measurement gave no figure; the cluster's log:" >&2
             cat "$dir/up.log" >&2; exit 1; }
    line=$(python3 -c "
u, p, h, t, r = $uniform, $p99, $hot, $tally_rps, $redis_rps
print(f'{u:.0f} {p} {h:.0f} {h / u:.2f} {t:.0f} {r:.0f} {t / r:.2f}')")
    results+=("$line")
    read -r u p h hu t r tr <<< "$line"
    printf 'round %d: uniform %s adds/s (p99 %s ms)  hot %s (hot/uniform %s)  RESP INCR %s vs Redis %s rps (ratio %s)\n' \
        "$round" "$u" "$p" "$h" "$hu" "$t" "$r" "$tr"
done
printf '%s\n' "${results[@]}" | python3 -c "
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
m = [statistics.median(c) for c in zip(*rows)]
print(f'median: uniform {m[0]:.0f} adds/s (p99 {m[1]:.2f} ms; target >= 100000, < 5)  '
      f'hot/uniform {m[3]:.2f} (>= 0.8)  Tally/Redis {m[6]:.2f} (>= 0.5)')"
