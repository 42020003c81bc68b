#!/usr/bin/env bash
# The native protocol under qs-bench native, against a recvmmsg/sendmmsg echo server with the
# same datagrams: quicksilver -t 1 pinned to core 0 (default 4 partitions, and --partitions 1;
# PARTITIONS=4 for the first only),
# the client on core 1, windows 1 and 4 (WINDOWS="1 4 16" to choose), 32 requests per datagram
# (PER_DATAGRAM="1 8 32" to choose), ROUNDS interleaved rounds. Prints JSON lines.
# Extra arguments go to every qs-bench native run (e.g. --busy-poll-us 200).
#   scripts/bench-native.sh [ROUNDS] [QS-BENCH ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
cargo build --release -q -p qs-server -p qs-bench
port_free() { ! ss -Hltun | awk '{print $5}' | grep -q ":$1\$"; }
for round in $(seq 1 "$rounds"); do
  for partitions in ${PARTITIONS:-4 1}; do
    base=$((31000 + round * 10)); tcp=$((32000 + round))
    taskset -c 0 target/release/quicksilver -t 1 --partitions "$partitions" -p "$tcp" -l 127.0.0.1 \
      --native-port "$base" -m 1024 & pid=$!
    for _ in $(seq 1 200); do
      if printf 'version\r\n' | timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$tcp; cat >&3; head -c 7 <&3" 2>/dev/null | grep -q VERSION; then break; fi
      sleep 0.1
    done
    load=""
    for per_datagram in ${PER_DATAGRAM:-32}; do
      for window in ${WINDOWS:-1 4}; do
        taskset -c 1 target/release/qs-bench native --server "127.0.0.1:$base" --keys 1000000 \
          --server-pid "$pid" --duration 4 --window "$window" --per-datagram "$per_datagram" \
          --echo-probe --echo-cores 0 $load --json "$@" \
          | tail -1 | sed "s/^{/{\"round\":$round,\"server_partitions\":$partitions,/"
        load="--no-load"
      done
    done
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
