#!/usr/bin/env python3
"""Fills a memcached-compatible server until it refuses writes: `set key:N 0 0 <size>` in
pipelined batches of 100, sizes uniform in 16..1024 from random.Random(42), until 500 writes in a
row are refused (or LIMIT sets were sent). Prints items stored, user bytes (key + value) and the
server's curr_items and evictions. Used for store mode's items-per-memory comparison with
memcached -M (docs/benchmarks/HISTORY.md).

    scripts/store-fill.py PORT [LIMIT]
"""
import socket, sys, random
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port))
rng = random.Random(42)
stored = refused = in_a_row = 0
user_bytes = 0
n = 0
buf = b""
def read_lines(k):
    global buf
    out = []
    while len(out) < k:
        while b"\r\n" not in buf:
            buf += s.recv(1 << 16)
        line, buf = buf.split(b"\r\n", 1)
        out.append(line)
    return out
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 10**9
while in_a_row < 500 and n < limit:
    batch = []
    reqs = []
    for _ in range(100):
        size = rng.randint(16, 1024)
        key = b"key:%d" % n
        n += 1
        reqs.append(b"set %s 0 0 %d\r\n%s\r\n" % (key, size, b"v" * size))
        batch.append(size + len(key))
    s.sendall(b"".join(reqs))
    for line, size in zip(read_lines(100), batch):
        if line == b"STORED":
            stored += 1; user_bytes += size; in_a_row = 0
        else:
            refused += 1; in_a_row += 1
s.sendall(b"stats\r\n")
stats = {}
while True:
    line = read_lines(1)[0]
    if line == b"END": break
    _, k, v = line.decode().split(" ", 2)
    stats[k] = v
print(f"stored {stored} items, {user_bytes} user bytes (key+value), refused {refused}; curr_items {stats.get('curr_items')} evictions {stats.get('evictions')}")
