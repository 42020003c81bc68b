#!/usr/bin/python3
"""A full SCAN walk (COUNT 10, redis-py's scan_iter default) over 3, 1,000 and 1,000,000 keys,
on quicksilver at -m 64 and -m 4096 and on redis-server 7.0, one server at a time on loopback:
the calls the walk takes, its wall time and the server's CPU time for it (/proc). Keys that do
not fit (-m 64 holds some 500,000 of these) are evicted, so the walk lists what is stored: the
keys seen are shown beside the keys written. Prints a Markdown table (docs/BENCHMARKS.md).

    cargo build --release -p qs-server && /usr/bin/python3 scripts/bench-scan.py
"""
import os
import subprocess
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

QS = os.path.join(benchlib.ROOT, "target/release/quicksilver")
KEYS = [3, 1000, 1_000_000]


def start(kind, memory):
    port = benchlib.free_port()
    if kind == "quicksilver":
        args = [QS, "-p", "0", "-m", str(memory), "-t", "1", "-l", f"127.0.0.1,proto[resp]:127.0.0.1:{port}"]
    else:
        args = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                "--maxmemory", f"{memory}mb", "--maxmemory-policy", "allkeys-lru"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    benchlib.wait_port(port)
    return server, port


def load(client, count):
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.set(f"key:{n:07}", "v")
        if n % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()


def walk(client, pid):
    cpu, start, calls, seen, cursor = benchlib.cpu_seconds(pid), time.monotonic(), 0, set(), 0
    while True:
        cursor, keys = client.scan(cursor, count=10)
        calls += 1
        seen.update(keys)
        if cursor == 0:
            break
    return calls, len(seen), time.monotonic() - start, benchlib.cpu_seconds(pid) - cpu


def main():
    print("| server | -m / maxmemory | keys written | keys seen | SCAN calls | walk time | server CPU |")
    print("|---|---|---|---|---|---|---|")
    for kind, memory in [("quicksilver", 64), ("quicksilver", 4096), ("redis-server", 4096)]:
        for count in KEYS:
            server, port = start(kind, memory)
            try:
                client = redis.Redis(port=port)
                load(client, count)
                calls, seen, wall, cpu = walk(client, server.pid)
                print(f"| {kind} | {memory} MB | {count:,} | {seen:,} | {calls:,} | {wall:.3f} s | {cpu:.2f} s |")
            finally:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
