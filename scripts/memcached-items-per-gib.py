#!/usr/bin/env python3
"""Fills a real memcached with MICA's tiny items (8-byte keys, 8-byte values) until its first
eviction and reports how many items it held per GiB of -m: the reference for qs-bench engine's
items_per_gib. Starts memcached on a free loopback port and stops it by PID.

Usage: scripts/memcached-items-per-gib.py [--memory-mib 256] [--key-bytes 8] [--value-bytes 8]
"""
import argparse
import socket
import subprocess
import time


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stats(conn):
    conn.sendall(b"stats\r\n")
    data = b""
    while not data.endswith(b"END\r\n"):
        data += conn.recv(65536)
    return {
        parts[1]: parts[2]
        for parts in (line.split(" ") for line in data.decode().split("\r\n"))
        if len(parts) == 3
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-mib", type=int, default=256)
    parser.add_argument("--key-bytes", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=8)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        ["memcached", "-u", "nobody", "-l", "127.0.0.1", "-p", str(port), "-m", str(args.memory_mib),
         "-t", "1", "-U", "0"]
    )
    try:
        deadline = time.time() + 10
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        value = b"v" * args.value_bytes
        number, chunk = 0, 5000
        while True:
            batch = b"".join(
                b"set %s 0 0 %d noreply\r\n%s\r\n"
                % (str(n).zfill(args.key_bytes).encode(), args.value_bytes, value)
                for n in range(number, number + chunk)
            )
            conn.sendall(batch)
            number += chunk
            current = stats(conn)
            if int(current["evictions"]) > 0:
                break
        items = int(current["curr_items"])
        gib = int(current["limit_maxbytes"]) / (1 << 30)
        print(
            f"memcached {current['version']}: -m {args.memory_mib} held {items} items of "
            f"{args.key_bytes}B/{args.value_bytes}B at its first eviction: "
            f"{items / gib:.0f} items/GiB, {(1 << 30) / (items / gib):.1f} bytes/item"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
