#!/bin/bash
# Server CPU per request, split into user and system time, under memtier_benchmark: the server
# alone on core 0, memtier on core 1 (one thread, 50 connections), its keys loaded first, then
# 5 s of 1 set to 10 gets (RATIO) at pipeline DEPTH; the server's utime and stime from
# /proc/PID/stat over memtier's request count, with memtier's requests/s and p99. PORT in the
# server command is replaced by a free port; PROTO is memtier's protocol (memcache_text,
# memcache_binary, redis).
#
#     scripts/cpu-split.sh NAME DATA DEPTH -- SERVER COMMAND WITH PORT...
#     PROTO=redis scripts/cpu-split.sh qs-resp 32 16 -- target/release/quicksilver -t 1 -U 0 \
#         -m 256 -l 'proto[resp]:127.0.0.1:PORT'
set -u
name=$1; data=$2; depth=$3; shift 4
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
cmd=("${@//PORT/$port}")
taskset -c 0 "${cmd[@]}" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break
    sleep 0.05
done
M=${MEMTIER:-$HOME/.cache/memtier/src/memtier_benchmark}
keys=${KEYS:-$((data > 1000 ? 3000 : 100000))}
C=(-s 127.0.0.1 -p "$port" -P "${PROTO:-memcache_text}" -t 1 -c 50 -d "$data" --key-maximum="$keys" --hide-histogram)
out=$(mktemp)
taskset -c 1 "$M" "${C[@]}" --ratio 1:0 --key-pattern P:P -n $((keys / 50)) >/dev/null 2>&1
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
taskset -c 1 "$M" "${C[@]}" --ratio "${RATIO:-1:10}" --key-pattern R:R --pipeline "$depth" --test-time 5 >"$out" 2>&1
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
ops=$(grep Totals "$out" | awk '{print $2}')
# memtier's Totals: ops/s, hits/s, misses/s, average, p50, p99, p99.9 (ms), KB/s.
p99=$(grep Totals "$out" | awk '{print $7}')
python3 -c "o=$ops*5; t=100; print(f'$name d$depth: {$ops:.0f} ops/s  p99 {$p99:.3f} ms  user {($u1-$u0)*1e6/t/o:.2f} us  sys {($s1-$s0)*1e6/t/o:.2f} us  total {($u1-$u0+$s1-$s0)*1e6/t/o:.2f}')"
rm -f "$out"
kill $pid; wait $pid 2>/dev/null
