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
# With BEFORE set to another tallyd, every round also measures that build
# (steps 1 to 3 on a fresh cluster of its own, driven by the same
# TALLY_BENCH), in an order that alternates from round to round, and the
# summary adds the median of the rounds' TALLYD/BEFORE ratios.
#
# Usage: [BEFORE=old/tallyd] targets.sh TALLYD TALLY_BENCH [ROUNDS]
# Needs redis-server, redis-cli and redis-benchmark (Debian: redis-server,
# redis-tools).
set -euo pipefail
after=$(realpath "$1"); bench=$(realpath "$2"); rounds=${3:-3}
before=${BEFORE:+$(realpath "$BEFORE")}
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

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

# A free loopback port for Redis.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
resp=$(sed -n 's/^resp *= *"127.0.0.1:\([0-9]*\)".*/\1/p' "$root/cluster.toml" | head -1)

rps() { redis-benchmark -h 127.0.0.1 -p "$1" -t incr -c 50 -n 1000000 -q 2>&1 \
            | tr '\r' '\n' | awk '/requests per second/ { v = $2 } END { print v }'; }
bench_line() { "$bench" --config "$dir/data/cluster.toml" --cl quorum --concurrency 128 \
                   --duration 10 --workload "$1" 2>&1 \
               | awk '/throughput/ { t = $2 } /latency ms/ { p = $8 } END { print t, p }'; }

# tally TALLYD: steps 1 to 3 on a fresh cluster of TALLYD; sets
# $figures to "uniform p99 hot rps".
tally() {
    rm -rf "$dir/data"; mkdir -p "$dir/data"
    sed -e "s#data/#$dir/data/#" "$root/cluster.toml" > "$dir/data/cluster.toml"
    "$1" up --config "$dir/data/cluster.toml" > "$dir/up.log" 2>&1 &
    up=$!
    sleep 4
    pgrep -P "$up" > /dev/null || { echo "the cluster did not start:" >&2; cat "$dir/up.log" >&2; exit 1; }
    local uniform p99 hot rps
    read -r uniform p99 < <(bench_line uniform)
    read -r hot _ < <(bench_line hot)
    rps=$(rps "$resp")
    stop
    [ -n "$uniform" ] && [ -n "$hot" ] && [ -n "$rps" ] \
        || { echo "round $round: a measurement gave no figure; the cluster's log:" >&2
             cat "$dir/up.log" >&2; exit 1; }
    figures="$uniform $p99 $hot $rps"
}

# redis_rps: step 3 against a fresh redis-server; sets $redis_rps.
redis_rps() {
    rm -rf "$dir/redis"; mkdir -p "$dir/redis"
    redis-server --port "$port" --bind 127.0.0.1 --appendonly yes --appendfsync everysec \
        --dir "$dir/redis" --save "" > "$dir/redis.log" 2>&1 &
    redis=$!
    wait_pong "$port"
    redis_rps=$(rps "$port")
    stop
    [ -n "$redis_rps" ] || { echo "round $round: redis-benchmark gave no figure" >&2; exit 1; }
}

results=(); : > "$dir/before"
for round in $(seq "$rounds"); do
    if [ -n "$before" ] && [ $(( round % 2 )) = 0 ]; then
        tally "$before"; echo "$figures" >> "$dir/before"; tally "$after"
    else
        tally "$after"; mine=$figures
        [ -n "$before" ] && { tally "$before"; echo "$figures" >> "$dir/before"; }
        figures=$mine
    fi
    redis_rps
    line=$(python3 -c "
u, p, h, t = map(float, '$figures'.split()); r = $redis_rps
print(f'{u:.0f} {p} {h:.0f} {h / u:.2f} {t:.0f} {r:.0f} {t / r:.2f}')")
    results+=("$line")
    read -r u p h hu t r tr <<< "$line"
    printf 'round %d: uniform %s adds/s (p99 %s ms)  hot %s (hot/uniform %s)  RESP INCR %s vs Redis %s rps (ratio %s)\n' \
        "$round" "$u" "$p" "$h" "$hu" "$t" "$r" "$tr"
    [ -z "$before" ] || tail -1 "$dir/before" | awk -v r="$round" \
        '{ printf "round %d before: uniform %.0f adds/s (p99 %s ms)  hot %.0f  RESP INCR %.0f rps\n", r, $1, $2, $3, $4 }'
done
printf '%s\n' "${results[@]}" | python3 -c "
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
m = [statistics.median(c) for c in zip(*rows)]
print(f'median: uniform {m[0]:.0f} adds/s (p99 {m[1]:.2f} ms; target >= 100000, < 5)  '
      f'hot/uniform {m[3]:.2f} (>= 0.8)  Tally/Redis {m[6]:.2f} (>= 0.5)')
before = [list(map(float, l.split())) for l in open('$dir/before') if l.strip()]
for name, a, b in (('uniform', 0, 0), ('hot', 2, 2), ('RESP INCR', 4, 3)) if before else ():
    pairs = [r[a] / x[b] for r, x in zip(rows, before)]
    print(f'after/before {name}: median {statistics.median(pairs):.3f} of {len(pairs)} rounds '
          f'({min(pairs):.2f} to {max(pairs):.2f}); '
          f'{statistics.median(x[b] for x in before):.0f} before, '
          f'{statistics.median(r[a] for r in rows):.0f} after')"
