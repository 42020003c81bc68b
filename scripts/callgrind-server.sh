#!/bin/bash
# User-space instructions per operation of the quicksilver server (one worker) under memtier
# traffic, counted by callgrind (repeatable where CPU time is not): 100,000 keys preloaded, then
# 200,000 operations at 1 set to 19 gets, uniform keys, 50 connections, pipeline depth 16; only
# the measured phase is counted (callgrind_control -z, then -d).
#
#     scripts/callgrind-server.sh [server options...]      e.g. -o mrc_sample=0
#     PIPELINE=1 REQUESTS=1000 scripts/callgrind-server.sh    depth 1, 50,000 operations
#     PROTOCOL=memcache_binary scripts/callgrind-server.sh    the binary protocol
#     PROTOCOL=redis scripts/callgrind-server.sh              the Redis protocol (a proto[resp] listener)
#     DATA=102400 KEYS=100 PRELOAD=2 REQUESTS=20 scripts/callgrind-server.sh   100 KB values
#     BINARY=path/to/quicksilver scripts/callgrind-server.sh   another build
#     WORKERS=2 RATIO=1:0 scripts/callgrind-server.sh         sets, half of them forwarded
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
MEMTIER=${MEMTIER:-$HOME/.cache/memtier/src/memtier_benchmark}
PORT=$((23500 + RANDOM % 400))
# memtier's port: a Redis listener of its own for PROTOCOL=redis (stats still come from PORT).
LOAD_PORT=$PORT
LISTEN=127.0.0.1
if [ "${PROTOCOL:-}" = redis ]; then
    LOAD_PORT=$((PORT + 1000))
    LISTEN="127.0.0.1,proto[resp]:127.0.0.1:$LOAD_PORT"
fi
OUT=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$OUT"/cg.out.1 "$KEEP"; rm -rf "$OUT"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" "${BINARY:-$REPO/target/release/quicksilver}" \
    -t "${WORKERS:-1}" -p "$PORT" -l "$LISTEN" "$@" >/dev/null 2>"$OUT/valgrind.err" &
PID=$!
for _ in $(seq 60); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null && break
    sleep 0.5
done
operations() {
    python3 - "$PORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    data += s.recv(65536)
stats = dict(line.split()[1:3] for line in data.decode().splitlines() if line.startswith("STAT"))
print(int(stats["cmd_get"]) + int(stats["cmd_set"]))
PY
}
COMMON=(-s 127.0.0.1 -p "$LOAD_PORT" -P "${PROTOCOL:-memcache_text}" -t 1 -c 50 -d "${DATA:-32}" --key-maximum "${KEYS:-100000}" --hide-histogram)
"$MEMTIER" "${COMMON[@]}" --ratio 1:0 --key-pattern P:P -n "${PRELOAD:-2000}" >/dev/null 2>&1
BEFORE=$(operations)
callgrind_control -z "$PID" >/dev/null 2>&1
"$MEMTIER" "${COMMON[@]}" --ratio "${RATIO:-1:19}" --key-pattern R:R --pipeline "${PIPELINE:-16}" -n "${REQUESTS:-4000}" >/dev/null 2>&1
AFTER=$(operations)
callgrind_control -d "$PID" >/dev/null 2>&1
kill "$PID"
wait "$PID" || true
INSTRUCTIONS=$(callgrind_annotate "$OUT/cg.out.1" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | awk '{print $1}' | tr -d ,)
python3 -c "print(f'server options: $*; {$AFTER - $BEFORE} operations, {$INSTRUCTIONS} instructions, {$INSTRUCTIONS / ($AFTER - $BEFORE):.1f} per operation')"
