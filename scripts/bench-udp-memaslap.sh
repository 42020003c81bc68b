#!/bin/bash
# memcached UDP (-U): server CPU per operation under memaslap -U (90% get / 10% set, 16
# connections), quicksilver against memcached 1.6, three interleaved rounds, server on core 1.
# Usage: scripts/bench-udp-memaslap.sh  (needs target/release/quicksilver, memcached, memcaslap)
port=22151
for round in 1 2 3; do
for srv in qs mc; do
  if [ $srv = qs ]; then taskset -c 1 "$(dirname "$0")/../target/release/quicksilver" -p $port -U $port -t 1 & pid=$!
  else taskset -c 1 memcached -u nobody -p $port -U $port -t 1 -l 127.0.0.1 & pid=$!; fi
  sleep 0.5
  t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  out=$(taskset -c 0 memcaslap -s 127.0.0.1:$port -U -t 4s -T 1 -c 16 2>&1)
  t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  ops=$(echo "$out" | grep -oP 'Ops: \K[0-9]+')
  drops=$(echo "$out" | grep -oP 'packet_drop: \K[0-9]+')
  echo "$srv round=$round ops=$ops drops=$drops cpu_ticks=$((t1-t0)) us_per_op=$(echo "($t1-$t0)*10000/$ops" | bc -l | cut -c1-5)"
  kill $pid; wait $pid 2>/dev/null; sleep 0.3
done; done
