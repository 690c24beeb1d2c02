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
