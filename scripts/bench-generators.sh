#!/usr/bin/env bash
# Does the load generator matter? memcached 1.6 driven by memaslap (libmemcached-tools'
# memcaslap, C) and by qs-bench run with the same shape: 50 connections, one request in flight
# each, 16-byte keys and 64-byte values (memaslap needs keys of 16 bytes or more), 95% get, uniform over the same number of keys. memcached on core 0,
# the generator on core 1; server CPU per operation from /proc over the run; three interleaved
# rounds. Prints one line per run.
# Usage: scripts/bench-generators.sh [seconds, default 4]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-4}"
cargo build --release -q -p qs-bench
port=22161
user_flag=()
[ "$(id -u)" -eq 0 ] && user_flag=(-u nobody)
config=$(mktemp)
trap 'rm -f "$config"' EXIT
# memaslap's workload file: key and value sizes (min max proportion), then command mix
# (0 = set, 1 = get, with proportions).
printf 'key\n16 16 1\nvalue\n64 64 1\ncmd\n0 0.05\n1 0.95\n' >"$config"
ticks() { awk '{print $14+$15}' /proc/"$1"/stat; }
for round in 1 2 3; do
    for generator in memaslap qs-bench; do
        taskset -c 0 memcached "${user_flag[@]}" -l 127.0.0.1 -p $port -U 0 -t 1 -m 256 & pid=$!
        sleep 0.5
        if [ $generator = memaslap ]; then
            # memaslap stores its keys first (its warm-up), then runs the mix for the time given.
            out=$(taskset -c 1 memcaslap -s 127.0.0.1:$port -T 1 -c 50 -F "$config" -t 1s 2>&1)
            t0=$(ticks $pid)
            out=$(taskset -c 1 memcaslap -s 127.0.0.1:$port -T 1 -c 50 -F "$config" -t "${secs}s" 2>&1)
            t1=$(ticks $pid)
            ops=$(echo "$out" | grep -oP 'Run time: .*Ops: \K[0-9]+' | tail -1)
            [ -n "$ops" ] || ops=$(echo "$out" | grep -oP 'Ops: \K[0-9]+' | tail -1)
            echo "$generator round=$round ops_per_sec=$((ops / secs)) server_cpu_us_per_op=$(echo "($t1-$t0)*10000/$ops" | bc -l | cut -c1-5)"
        else
            taskset -c 1 target/release/qs-bench run --server 127.0.0.1:$port --server-pid $pid \
                --connections 50 --depth 1 --dataset small --get-ratio 0.95 --keys 100000 \
                --duration "$secs" --warmup 1 --quiet | head -2 | tr '\n' ' ' | \
                sed "s/^/$generator round=$round /"
            echo
        fi
        kill $pid
        wait $pid 2>/dev/null || true
        sleep 0.3
    done
done
