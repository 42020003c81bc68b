#!/bin/bash
# The first run a Redis user makes: redis-benchmark with its defaults (50 clients, 100,000
# requests per test, 3-byte values) against each server with its own defaults, all on the same
# cores, nothing pinned: SET, GET, INCR and MSET (the tests of what a cache serves), ROUNDS
# rounds interleaved. Prints each test's requests/s and p50 as redis-benchmark reports them, and
# the server's CPU per request (user + system from /proc/PID/stat over the requests sent).
#
#     scripts/bench-redis-first-run.sh                 quicksilver, quicksilver -t 1, redis-server, pogocache
#     ROUNDS=5 POGOCACHE=path scripts/bench-redis-first-run.sh
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
QS=${QS_BIN:-$REPO/target/release/quicksilver}
POGO=${POGOCACHE:-$HOME/.cache/servers/pogocache/pogocache}
TESTS=set,get,incr,mset
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
start() {
    local name=$1 port=$2
    case $name in
        quicksilver) "$QS" -U 0 -p 0 -l "proto[resp]:127.0.0.1:$port" >/dev/null 2>&1 & ;;
        quicksilver-t1) "$QS" -t 1 -U 0 -p 0 -l "proto[resp]:127.0.0.1:$port" >/dev/null 2>&1 & ;;
        quicksilver-epoll) "$QS" -o io_backend=epoll -U 0 -p 0 -l "proto[resp]:127.0.0.1:$port" >/dev/null 2>&1 & ;;
        redis-server) redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 & ;;
        pogocache) "$POGO" -p "$port" >/dev/null 2>&1 & ;;
    esac
    echo $!
}
for round in $(seq "${ROUNDS:-3}"); do
    for name in ${SERVERS:-quicksilver quicksilver-t1 redis-server pogocache}; do
        [ "$name" = pogocache ] && [ ! -x "$POGO" ] && continue
        port=$(free_port)
        pid=$(start "$name" "$port")
        for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
        read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
        out=$(redis-benchmark -p "$port" -t "$TESTS" -q 2>&1 | tr '\r' '\n' | grep 'requests per second')
        read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
        # The tests the server answered (pogocache serves no MSET: redis-benchmark skips it).
        requests=$(( 100000 * $(echo "$out" | grep -c 'requests per second') ))
        cpu=$(python3 -c "print(f'{($u1 - $u0 + $s1 - $s0) * 1e6 / 100 / $requests:.2f}')")
        echo "round $round $name: CPU per request ${cpu} us"
        echo "$out" | sed "s/^/    /"
        kill "$pid"; wait "$pid" 2>/dev/null
    done
done
