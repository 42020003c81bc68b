#!/usr/bin/env bash
# YCSB core workloads A, B, C, D, F (E needs range scans: refused) against quicksilver and
# memcached 1.6, one worker each pinned to core 0, qs-bench on core 1; 1 KiB values (the large
# dataset: 128-byte keys, 1024-byte values, near YCSB's 1 KB records), 100k records, 50
# connections, depth 1 and 16, interleaved server by server. One JSON line per run.
# Usage: scripts/bench-ycsb.sh [seconds per point, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-3}"
cargo build --release -q -p qs-server -p qs-bench
port_qs=22411
port_mc=22412
user_flag=()
[ "$(id -u)" -eq 0 ] && user_flag=(-u nobody)
taskset -c 0 target/release/quicksilver -l 127.0.0.1 -p $port_qs -t 1 -m 1024 & qs_pid=$!
taskset -c 0 memcached "${user_flag[@]}" -l 127.0.0.1 -p $port_mc -U 0 -t 1 -m 1024 & mc_pid=$!
trap 'kill $qs_pid $mc_pid 2>/dev/null || true' EXIT
for port in $port_qs $port_mc; do
    for _ in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
for workload in a b c d f; do
    for depth in 1 16; do
        for target in "quicksilver $port_qs $qs_pid" "memcached $port_mc $mc_pid"; do
            set -- $target
            taskset -c 1 target/release/qs-bench run --server 127.0.0.1:$2 --server-pid $3 \
                --ycsb $workload --dataset large --keys 100000 --connections 50 --depth $depth \
                --duration "$secs" --warmup 1 --quiet --json | tail -1 | sed "s/^{/{\"name\":\"$1\",/"
        done
    done
done
