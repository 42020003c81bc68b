#!/usr/bin/env bash
# Restart time with -e: fills a quicksilver whose logs live in a memory file on /dev/shm with
# GIB gibibytes of items (1,000-byte values, memtier_benchmark), kills it with SIGKILL, starts it
# again on the same file and reports how long until it answers, the server's own figure for
# taking the items back, and how many it serves. A benchmark, not a test.
#
#   scripts/bench-restart.sh GIB [THREADS]      e.g. scripts/bench-restart.sh 1
#   SERVER=memcached scripts/bench-restart.sh 1 the same with memcached 1.6's -e, stopped with
#                                               SIGUSR1 (its -e restarts warm only after that)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GIB=${1:?usage: bench-restart.sh GIB [THREADS]}
THREADS=${2:-2}
MEMTIER=${MEMTIER:-$HOME/.cache/memtier/src/memtier_benchmark}
SERVER=${SERVER:-quicksilver}
if [ "$SERVER" = memcached ]; then
    BIN=memcached
    EXTRA=(-u nobody)
    STOP=USR1
else
    BIN=$REPO/target/release/quicksilver
    EXTRA=()
    STOP=KILL
fi
FILE=/dev/shm/qs-bench-restart-$$
PORT=$((24500 + RANDOM % 400))
# Item memory 12% above the data: each 1,000-byte value takes ~1,040 bytes with its header and key.
MEM=$((GIB * 1024 * 112 / 100))
KEYS=$((GIB * 1024 * 1024))
LOG=$(mktemp)
trap 'rm -f "$FILE" "$FILE.meta" "$LOG"; [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null; true' EXIT

wait_answer() {
    python3 - "$PORT" <<'PY'
import socket, sys, time
start = time.monotonic()
while True:
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        s.sendall(b"version\r\n")
        if s.recv(100).startswith(b"VERSION"):
            break
    except OSError:
        time.sleep(0.005)
PY
}

stat() {
    python3 - "$PORT" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    data += s.recv(65536)
print(dict(l.split()[1:3] for l in data.decode().splitlines() if l.startswith("STAT"))[sys.argv[2]])
PY
}

"$BIN" "${EXTRA[@]}" -t "$THREADS" -m "$MEM" -p "$PORT" -l 127.0.0.1 -e "$FILE" 2>"$LOG" &
PID=$!
wait_answer
"$MEMTIER" -s 127.0.0.1 -p "$PORT" -P memcache_text -t 2 -c 25 --ratio 1:0 --key-pattern P:P \
    --key-minimum 1 --key-maximum "$KEYS" -n allkeys -d 1000 --pipeline 16 --hide-histogram >/dev/null 2>&1
ITEMS=$(stat curr_items)
BYTES=$(stat bytes)
kill -s "$STOP" "$PID"
wait "$PID" 2>/dev/null || true
sync
# memcached takes its metadata back only a second or more after the stop (its clock check).
[ "$SERVER" = memcached ] && sleep 1.5
START=$(date +%s.%N)
"$BIN" "${EXTRA[@]}" -t "$THREADS" -m "$MEM" -p "$PORT" -l 127.0.0.1 -e "$FILE" 2>"$LOG" &
PID=$!
wait_answer
END=$(date +%s.%N)
AFTER=$(stat curr_items)
echo "$SERVER -e $FILE, -m $MEM, -t $THREADS: $ITEMS items ($BYTES bytes) before SIG$STOP, $AFTER after;" \
    "answering $(python3 -c "print(f'{$END - $START:.2f}')") s after start; server: $(grep restart "$LOG" | tr '\n' ' ')"
