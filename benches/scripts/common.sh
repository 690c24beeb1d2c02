# Shared by the benchmark scripts that talk RESP (sourced, not run).

# wait_pong PORT: waits up to 10 s for PONG on PORT (redis-cli exits 0
# even when it cannot connect, so the answer is what counts).
wait_pong() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.1
    done
    echo "nothing answers PONG on port $1" >&2; exit 1
}

# start_three: `tallyd up` of the repository's cluster.toml, its data
# under $dir/three (uses $tallyd, $root and $dir; sets $pid).
start_three() {
    rm -rf "$dir/three"; mkdir -p "$dir/three"
    sed -e "s#data/#$dir/three/#" "$root/cluster.toml" > "$dir/three/cluster.toml"
    "$tallyd" up --config "$dir/three/cluster.toml" > "$dir/three/up.log" 2>&1 & pid=$!
    wait_pong 7301; sleep 2
}

# stop_pid: stops $pid (Ctrl-C, as an operator would) and waits for it.
stop_pid() { kill -INT "$pid" 2>/dev/null || kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# start_one: cluster.toml's first node alone, replication factor 1, under
# $dir/one (uses $tallyd, $root and $dir; sets $pid).
start_one() {
    rm -rf "$dir/one"; mkdir -p "$dir/one"
    awk '/^\[\[node\]\]/ { n++ } n < 2' "$root/cluster.toml" \
        | sed -e "s#data/#$dir/one/#" -e 's/^replication_factor = .*/replication_factor = 1/' \
        > "$dir/one/cluster.toml"
    "$tallyd" up --config "$dir/one/cluster.toml" > "$dir/one/up.log" 2>&1 & pid=$!
    wait_pong 7301
}

# vs_redis ROUNDS WHAT BENCH [START]: alternates `BENCH 7301` on a fresh
# Tally (START: start_three, the default, or start_one) and `BENCH
# $redis_port` on a fresh redis-server --appendonly yes --appendfsync
# always (under $dir/redis), ROUNDS times; BENCH prints a rate. Prints
# each round, then the medians and their ratio.
vs_redis() {
    local rounds=$1 what=$2 bench=$3 start=${4:-start_three} runs=() t r
    local tally=tally-3; [ "$start" = start_one ] && tally=tally-1
    for round in $(seq "$rounds"); do
        "$start"
        t=$("$bench" 7301); echo "round $round $tally: $t"; runs+=("tally $t")
        stop_pid
        mkdir -p "$dir/redis"; rm -rf "$dir/redis"/*
        redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" --save "" \
            --appendonly yes --appendfsync always > "$dir/redis.log" 2>&1 & pid=$!
        wait_pong "$redis_port"
        r=$("$bench" "$redis_port"); echo "round $round redis: $r"; runs+=("redis $r")
        kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
    done
    printf '%s\n' "${runs[@]}" | python3 -c "
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
med = lambda s: statistics.median(float(r[1]) for r in rows if r[0] == s)
print(f'median $what: redis {med(\"redis\"):.0f}, $tally {med(\"tally\"):.0f} ({med(\"tally\") / med(\"redis\"):.2f}x)')"
}
