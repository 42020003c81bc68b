#!/usr/bin/env bash
# Does the load generator matter? memcached 1.6 driven by libmemcached-tools' memaslap
# (memcaslap: C, libevent) and by qs-bench run in the same shape: 50 connections, one request in
# flight each, 16-byte keys and 64-byte values (memaslap needs keys of 16 bytes or more), 95% get.
#
# memaslap's gets walk round the keys each connection has set so far (its task window, here 1k
# keys per connection: at most 50,000 keys), so its working set starts tiny and grows; the
# server's cost per operation grows with it. Both generators therefore run long enough to reach
# a steady state, and the figures come from memcached's own counters (cmd_get + cmd_set,
# rusage_user + rusage_system from `stats`) sampled at 8 s and 12 s into each run: the same
# measurement for both, relying on neither generator's report. qs-bench runs over 50,000 keys in
# turn (--dist sequential, memaslap's pattern) and uniformly.
#
# memcached on core 0, the generator on core 1; rounds interleaved. One line per run.
# Usage: scripts/bench-generators.sh [rounds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
cargo build --release -q -p qs-bench
port=22161
user_flag=()
[ "$(id -u)" -eq 0 ] && user_flag=(-u nobody)
config=$(mktemp)
trap 'rm -f "$config"' EXIT
# memaslap's workload file: key and value sizes (min max proportion), then command mix
# (0 = set, 1 = get, with proportions).
printf 'key\n16 16 1\nvalue\n64 64 1\ncmd\n0 0.05\n1 0.95\n' >"$config"

# ops, user seconds, system seconds, items (from memcached's stats), then the generator's CPU
# seconds (from /proc) and the time.
sample() {
    { printf 'stats\r\nquit\r\n'; sleep 0.2; } | nc -q1 127.0.0.1 $port | tr -d '\r' | awk '
        $2 == "cmd_get" || $2 == "cmd_set" { ops += $3 }
        $2 == "rusage_user" { user = $3 } $2 == "rusage_system" { sys = $3 }
        $2 == "curr_items" { items = $3 }
        END { printf "%s %s %s %s ", ops, user, sys, items }'
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%s ", ($14 + $15) / hz }' /proc/"$gen"/stat
    date +%s.%N
}

qs=(target/release/qs-bench run --connections 50 --depth 1 --dataset small --get-ratio 0.95
    --keys 50000 --duration 16 --warmup 0 --quiet)
for round in $(seq "$rounds"); do
    for generator in memaslap qs-bench-sequential qs-bench-uniform; do
        taskset -c 0 memcached "${user_flag[@]}" -l 127.0.0.1 -p $port -U 0 -t 1 -m 1024 & pid=$!
        sleep 0.5
        case $generator in
            memaslap) taskset -c 1 memcaslap -s 127.0.0.1:$port -T 1 -c 50 -w 1k -F "$config" -t 16s \
                >/dev/null 2>&1 & gen=$! ;;
            qs-bench-sequential) taskset -c 1 "${qs[@]}" --server 127.0.0.1:$port --dist sequential \
                >/dev/null & gen=$! ;;
            qs-bench-uniform) taskset -c 1 "${qs[@]}" --server 127.0.0.1:$port --dist uniform \
                >/dev/null & gen=$! ;;
        esac
        sleep 8
        first=$(sample)
        sleep 4
        second=$(sample)
        wait $gen || true
        echo "$first $second" | awk -v g=$generator -v r="$round" '{
            ops = $7 - $1; cpu = ($8 + $9) - ($2 + $3)
            printf "%s round=%s ops_per_sec=%.0f server_cpu_us_per_op=%.3f server_user_us_per_op=%.3f items=%d generator_cpu_us_per_op=%.3f\n",
                g, r, ops / ($12 - $6), cpu / ops * 1e6, ($8 - $2) / ops * 1e6, $10, ($11 - $5) / ops * 1e6 }'
        kill $pid
        wait $pid 2>/dev/null || true
        sleep 0.3
    done
done
