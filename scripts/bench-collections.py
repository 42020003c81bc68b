#!/usr/bin/env python3
"""What Redis's collections cost (issue 77): server CPU time (user + system, /proc) per request
under redis-benchmark, quicksilver (`-t 1`) and redis-server 7.0 both running, their rounds
interleaved, 50 connections at depth 1 and 16, over 1,000 keys (`__rand_int__`):

    HSET of a 10-field hash (all ten fields each time), then HGET of one field
    SADD of one member of 100, then SISMEMBER
    LPUSH of one element, then LRANGE 0 9
    ZADD of one member, then ZRANGEBYSCORE 0 100

and, once per server, the bytes each holds per element (INFO memory's used_memory, less the
empty server's) for 1,000 hashes, sets, lists and sorted sets of 10 and 100 elements.

    scripts/bench-collections.py                 the table (the median of 3 rounds)
    scripts/bench-collections.py --rounds 5
"""
import argparse
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_seconds, free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = 1000
FIELDS = " ".join(f"f{i} v{i}" for i in range(10)).split()
LOADS = [
    ("HSET 10 fields", ["HSET", "h:__rand_int__", *FIELDS]),
    ("HGET", ["HGET", "h:__rand_int__", "f5"]),
    ("SADD", ["SADD", "s:__rand_int__", "m__rand_int__"]),
    ("SISMEMBER", ["SISMEMBER", "s:__rand_int__", "m5"]),
    ("LPUSH", ["LPUSH", "l:__rand_int__", "element"]),
    ("LRANGE 0 9", ["LRANGE", "l:__rand_int__", "0", "9"]),
    ("ZADD", ["ZADD", "z:__rand_int__", "__rand_int__", "m__rand_int__"]),
    ("ZRANGEBYSCORE", ["ZRANGEBYSCORE", "z:__rand_int__", "0", "100"]),
]


def command(port, *words):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
        data = b""
        while not data.endswith(b"\r\n") or data.startswith(b"$") and data.count(b"\r\n") < 2:
            data += s.recv(1 << 20)
        return data


def used_memory(port):
    info = command(port, b"INFO", b"memory").decode()
    return next(int(line.split(":")[1]) for line in info.split("\r\n") if line.startswith("used_memory:"))


def memory_per_element(port, pid, kind, size):
    """Bytes per element of 1,000 collections of `size` elements (used_memory's growth; for
    quicksilver its own item bytes, which INFO's used_memory counts)."""
    command(port, b"FLUSHALL")
    before = used_memory(port)
    with socket.create_connection(("127.0.0.1", port)) as s:
        for key in range(KEYS):
            words = {"hash": [b"HSET", b"h%d" % key] + [w for i in range(size) for w in (b"field%d" % i, b"value%d" % i)],
                     "set": [b"SADD", b"s%d" % key] + [b"member%d" % i for i in range(size)],
                     "list": [b"RPUSH", b"l%d" % key] + [b"element%d" % i for i in range(size)],
                     "zset": [b"ZADD", b"z%d" % key] + [w for i in range(size) for w in (b"%d" % i, b"member%d" % i)]}[kind]
            s.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
            got = b""
            while not got.endswith(b"\r\n"):
                got += s.recv(4096)
    return (used_memory(port) - before) / (KEYS * size)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = os.path.join(ROOT, "target", "release", "quicksilver")
    servers = []
    try:
        port, resp = free_port(), free_port()
        proc = subprocess.Popen([binary, "-t", "1", "-p", str(port), "-U", "0", "-m", "1024",
                                 "-l", f"proto[resp]:127.0.0.1:{resp}"], stdout=subprocess.DEVNULL)
        servers.append(("quicksilver -t 1", resp, proc))
        port = free_port()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL)
        servers.append(("redis-server 7.0", port, proc))
        for _, port, _ in servers:
            wait_port(port)
        print("| load | depth | quicksilver µs | redis-server µs | ratio |\n|---|---|---|---|---|")
        for depth in (1, 16):
            requests = 100_000 if depth > 1 else 30_000
            for name, words in LOADS:
                results = {server: [] for server, _, _ in servers}
                for _ in range(args.rounds):
                    for server, port, proc in servers:
                        before = cpu_seconds(proc.pid)
                        subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(requests),
                                        "-P", str(depth), "-r", str(KEYS), "-q", *words],
                                       check=True, capture_output=True)
                        results[server].append((cpu_seconds(proc.pid) - before) / requests * 1e6)
                ours, theirs = (sorted(v)[len(v) // 2] for v in results.values())
                print(f"| {name} | {depth} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |", flush=True)
        print("\n| collection | elements | quicksilver bytes/element | redis-server bytes/element |\n|---|---|---|---|")
        for kind in ("hash", "set", "list", "zset"):
            for size in (10, 100):
                ours, theirs = (memory_per_element(port, proc.pid, kind, size) for _, port, proc in servers)
                print(f"| {kind} | {size} | {ours:.1f} | {theirs:.1f} |", flush=True)
    finally:
        for _, _, proc in servers:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
