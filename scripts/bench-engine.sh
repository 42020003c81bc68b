#!/usr/bin/env bash
# The engine benchmark matrix of docs/benchmarks/HISTORY.md: MICA's datasets, uniform and zipf 0.99,
# 95% and 50% GET, prefetch on and off, and the hashbrown reference on the same keys.
# Usage: scripts/bench-engine.sh [tiny|small|large|all] > results.jsonl   (release build, one core)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p qs-bench --quiet
bin=target/release/qs-bench
which=${1:-all}
# Data sets: tiny is 2^27 keys = 4 GiB of items; the others about 1.5-2.5 GB.
declare -A keys=([tiny]=134217728 [small]=16777216 [large]=2097152)
declare -A ops=([tiny]=50000000 [small]=30000000 [large]=10000000)
for dataset in tiny small large; do
    [ "$which" = all ] || [ "$which" = "$dataset" ] || continue
    for dist in uniform zipf; do
        for ratio in 0.95 0.5; do
            for prefetch in on off; do
                taskset -c 1 $bin engine --dataset $dataset --dist $dist --get-ratio $ratio \
                    --keys ${keys[$dataset]} --ops ${ops[$dataset]} --prefetch $prefetch --json | tail -n 1
            done
            taskset -c 1 $bin engine --store hashbrown --dataset $dataset --dist $dist --get-ratio $ratio \
                --keys ${keys[$dataset]} --ops ${ops[$dataset]} --json | tail -n 1
        done
    done
done
