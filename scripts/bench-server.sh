#!/usr/bin/env bash
# Side-by-side server benchmark: quicksilver and memcached 1.6 in the same run, driven by the
# same load generator (qs-bench run, memcached text protocol, 50 connections, closed loop).
#   1 worker:  each server pinned to core 0, the load on core 1.
#   2 workers: each server on cores 0-1, the load sharing them.
# First the machine's floor (qs-bench probe: bare epoll and io_uring echo servers), then per worker count
# open-loop points at equal offered load, then the closed-loop matrix.
# Prints one JSON line per measurement (to stdout) for scripts/bench-server-table.py.
# Usage: scripts/bench-server.sh [seconds per point, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-3}"
cargo build --release -q -p qs-server -p qs-bench
bench=./target/release/qs-bench
qs=./target/release/quicksilver
port_qs=22401
port_mc=22402
user_flag=()
[ "$(id -u)" -eq 0 ] && user_flag=(-u nobody)

wait_port() { # poll until a server answers on 127.0.0.1:$1
    for _ in $(seq 1 300); do
        if (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing answers on port $1" >&2
    return 1
}

run_pair() { # workers server_cores load_cores open-loop-rates
    local workers=$1 server_cores=$2 load_cores=$3 rates=$4
    taskset -c "$server_cores" "$qs" -p $port_qs -t "$workers" -m 1024 & local qs_pid=$!
    taskset -c "$server_cores" memcached "${user_flag[@]}" -p $port_mc -l 127.0.0.1 -U 0 -t "$workers" -m 1024 & local mc_pid=$!
    wait_port $port_qs
    wait_port $port_mc
    # Open loop at equal offered load (Poisson arrivals, latency from the scheduled time).
    for rate in $rates; do
        for target in "qs $port_qs $qs_pid" "mc $port_mc $mc_pid"; do
            set -- $target
            taskset -c "$load_cores" "$bench" run --server 127.0.0.1:$2 --server-pid $3 \
                --dataset tiny --get-ratio 0.95 --dist uniform --depth 16 --rate "$rate" \
                --connections 50 --keys 100000 --duration "$secs" --warmup 1 --json \
                | tail -1 | sed "s/^{/{\"name\":\"$1\",\"workers\":$workers,/"
        done
    done
    for dataset in tiny small; do
        for get in 0.95 0.5; do
            for dist in uniform zipf; do
                for depth in 1 16; do
                    # Interleave the two servers point by point so drift hits both alike.
                    for target in "qs $port_qs $qs_pid" "mc $port_mc $mc_pid"; do
                        set -- $target
                        taskset -c "$load_cores" "$bench" run --server 127.0.0.1:$2 --server-pid $3 \
                            --dataset $dataset --get-ratio $get --dist $dist --depth $depth \
                            --connections 50 --keys 100000 --duration "$secs" --warmup 1 --json \
                            | tail -1 | sed "s/^{/{\"name\":\"$1\",\"workers\":$workers,/"
                    done
                done
            done
        done
    done
    kill $qs_pid $mc_pid
    wait $qs_pid $mc_pid 2>/dev/null || true
}

# The machine's floor: bare echo servers (epoll, io_uring) on core 0, its load on core 1.
taskset -c 1 "$bench" probe --server-cores 0 --duration "$secs" --json | tail -1 | sed 's/^{/{"name":"echo",/'
run_pair 1 0 1 "50000 100000 150000"
run_pair 2 0-1 0-1 "50000 100000"
