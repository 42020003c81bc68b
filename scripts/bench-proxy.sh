#!/bin/bash
# memtier_benchmark through memcached 1.6.45's proxy (one thread; routelib's route_direct over one
# pool of three) in front of three memcached 1.6.18 and then three quicksilver backends (-t 1
# -m 256 each): requests/s, p99 and the backends' CPU per request (utime+stime from /proc,
# summed over the three). ROUNDS interleaved rounds (default 3).
#
#     scripts/bench-proxy.sh     (scripts/build-memcached-proxy.sh and scripts/build-memtier.sh first)
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
M=${MEMTIER:-$HOME/.cache/memtier/src/memtier_benchmark}
P=${QS_MEMCACHED_PROXY:-$HOME/.cache/quicksilver/proxy/memcached-1.6.45/memcached}
QS=${QS_BIN:-$REPO/target/release/quicksilver}
free() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
run() {
    kind=$1; pids=(); ports=()
    for _ in 1 2 3; do
        port=$(free); ports+=("$port")
        if [ "$kind" = memcached ]; then
            memcached -u nobody -p "$port" -l 127.0.0.1 -U 0 -t 1 -m 256 &
        else
            "$QS" -p "$port" -l 127.0.0.1 -U 0 -t 1 -m 256 &
        fi
        pids+=($!)
    done
    sleep 0.5
    cfg=$(mktemp --suffix=.lua)
    printf 'pools{ main = { backends = { "127.0.0.1:%s", "127.0.0.1:%s", "127.0.0.1:%s" } } }\nroutes{ default = route_direct{ child = "main" } }\n' "${ports[@]}" >"$cfg"
    chmod 644 "$cfg"
    pp=$(free)
    "$P" -u nobody -p "$pp" -l 127.0.0.1 -U 0 -t 1 -o proxy_config=routelib,proxy_arg="$cfg" &
    ppid=$!
    sleep 0.5
    C=(-s 127.0.0.1 -p "$pp" -P memcache_text -t 1 -c 50 -d 32 --key-maximum=100000 --hide-histogram)
    "$M" "${C[@]}" --ratio 1:0 --key-pattern P:P -n 2000 >/dev/null 2>&1
    t0=0; for p in "${pids[@]}"; do t0=$((t0 + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
    out=$("$M" "${C[@]}" --ratio 1:10 --key-pattern R:R --test-time 10 2>/dev/null | grep Totals)
    t1=0; for p in "${pids[@]}"; do t1=$((t1 + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
    ops=$(echo "$out" | awk '{print $2}'); p99=$(echo "$out" | awk '{print $7}')
    python3 -c "print(f'$kind: {$ops:.0f} ops/s  p99 {$p99:.3f} ms  backend CPU {($t1-$t0)*1e6/100/($ops*10):.2f} us/request')"
    kill "$ppid" "${pids[@]}"; wait 2>/dev/null
    rm -f "$cfg"
}
for _ in $(seq "${ROUNDS:-3}"); do run memcached; run quicksilver; done
