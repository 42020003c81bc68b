#!/usr/bin/env bash
# Instructions per operation of the engine benchmark's timed loop, counted by callgrind (repeatable
# on a noisy machine). Reduced runs: 1M keys, 1M timed ops (+10% warm-up, also counted).
# Usage: scripts/bench-engine-instructions.sh   -> one line per configuration
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p qs-bench --quiet
bin=$PWD/target/release/qs-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ops=1000000
for config in "qs tiny 0.95 on" "qs tiny 0.95 off" "qs tiny 0.5 on" "hashbrown tiny 0.95 on" \
              "qs small 0.95 on" "hashbrown small 0.95 on" "qs large 0.95 on" "hashbrown large 0.95 on"; do
    read -r store dataset ratio prefetch <<<"$config"
    func=$([ "$store" = qs ] && echo '*timed_qs*' || echo '*timed_hashbrown*')
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" --toggle-collect="$func" \
        "$bin" engine --store "$store" --dataset "$dataset" --get-ratio "$ratio" --prefetch "$prefetch" \
        --keys 1000000 --ops $ops --huge-pages off >/dev/null 2>"$out/log"
    total=$(grep -oP 'Collected : \K[0-9]+' "$out/log")
    printf '%-10s %-6s get=%-5s prefetch=%-3s %6.0f instructions/op\n' \
        "$store" "$dataset" "$ratio" "$prefetch" "$(echo "$total / ($ops * 1.1)" | bc -l)"
done
