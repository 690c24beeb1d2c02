#!/usr/bin/env bash
# Tally against redis-server with the same durability (appendonly yes,
# appendfsync always: every write fsync'd before its reply, as Tally's
# `batch` sync), through the same redis-benchmark -c 50, alternated in one
# run: a one-node cluster (replication factor 1), the 3-node cluster of
# cluster.toml (replication factor 3) and Redis, each at -P 1 and -P 16,
# on uniform keys (-r 100000 INCRBY k:__rand_int__ 1) and one hot key
# (-t incr), each measured after a warm-up run. Prints every run, then per
# case the medians and Tally/Redis.
#
# With BEFORE set to another tallyd, every round also measures that build
# beside TALLYD, on fresh nodes, in an order that alternates from round
# to round, and the summary adds per case the median of the rounds'
# TALLYD/BEFORE ratios: the before/after comparison of two builds.
#
# Usage: [BEFORE=old/tallyd] vs-redis.sh TALLYD [ROUNDS]
#        (needs redis-server and redis-benchmark)
set -euo pipefail
after=$(realpath "$1"); rounds=${2:-3}
before=${BEFORE:+$(realpath "$BEFORE")}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/tally-vs-redis.XXXXXX)
pid=""
trap '[ -n "$pid" ] && { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
redis_port=7399

# shellcheck source=common.sh
. "$(dirname "$0")/common.sh"

# rate PORT P uniform|hot: requests per second of one redis-benchmark run,
# after a warm-up run of half as many requests (every system gets one: it
# leaves out first touches of keys, memtable flushes and connection setup).
rate() {
    local args=(-t incr) n=$(( $2 == 1 ? 100000 : 400000 ))
    [ "$3" = uniform ] && args=(-r 100000 INCRBY 'k:__rand_int__' 1)
    redis-benchmark -p "$1" -c 50 -P "$2" -n $(( n / 2 )) -q "${args[@]}" > /dev/null 2>&1
    redis-benchmark -p "$1" -c 50 -P "$2" -n "$n" -q "${args[@]}" 2>/dev/null \
        | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}

runs=()
measure() { # SYSTEM PORT
    for p in 1 16; do
        for w in uniform hot; do
            r=$(rate "$2" "$p" "$w")
            echo "round $round $1 P$p $w: $r requests/s"
            runs+=("$round $1 P$p $w $r")
        done
    done
}

# builds ROUND: the builds to measure this round, in the order to run them.
builds() {
    if [ -z "$before" ]; then echo "$after"
    elif [ $(( $1 % 2 )) = 1 ]; then echo "$after $before"
    else echo "$before $after"; fi
}
# label TALLYD: how the runs of this build are named.
label() { [ -n "$before" ] && [ "$1" = "$before" ] && echo -before || true; }

for round in $(seq "$rounds"); do
    for tallyd in $(builds "$round"); do
        start_one; measure "tally-1$(label "$tallyd")" 7301; stop_pid
    done
    for tallyd in $(builds "$round"); do
        start_three; measure "tally-3$(label "$tallyd")" 7301; stop_pid
    done

    rm -rf "$dir/redis"; mkdir -p "$dir/redis"
    redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" --save "" \
        --appendonly yes --appendfsync always > "$dir/redis/log" 2>&1 & pid=$!
    wait_pong "$redis_port"; measure redis "$redis_port"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
done

printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
runs = lambda s, p, w: [float(r[4]) for r in rows if r[1:4] == [s, p, w]]
med = lambda s, p, w: statistics.median(runs(s, p, w))
for p in ('P1', 'P16'):
    for w in ('uniform', 'hot'):
        redis = med('redis', p, w)
        line = ', '.join(f'{s} {med(s, p, w):.0f} ({med(s, p, w) / redis:.2f}x)' for s in ('tally-1', 'tally-3'))
        print(f'median {p} {w}: redis {redis:.0f}; {line}')
if '$before':
    for s in ('tally-1', 'tally-3'):
        for p in ('P1', 'P16'):
            for w in ('uniform', 'hot'):
                b = s + '-before'
                pairs = [x / y for x, y in zip(runs(s, p, w), runs(b, p, w))]
                print(f'after/before {s} {p} {w}: median {statistics.median(pairs):.3f} '
                      f'of {len(pairs)} rounds ({min(pairs):.2f} to {max(pairs):.2f}); '
                      f'{med(b, p, w):.0f} before, {med(s, p, w):.0f} after')"
