#!/usr/bin/env python3
"""Memory per idle connection: a fresh server per run, RSS before and after COUNT connections
that each said `version` once and then stay silent, and RSS after they close.

    scripts/bench-idle-memory.py [--runs 4] [--count 5000] [--silent] [--servers a,b]

With --silent the connections send nothing at all (opened and left idle).

    scripts/bench-idle-memory.py --churn 40 [--runs 1] [--warm]

Connection churn instead: after a fill (100,000 keys, values 10-5000 bytes), memtier_benchmark
reconnects every 3 requests for 40 s (2 threads x 25 connections, values 10-5000 bytes); prints
RSS growth over those 40 s in MiB.

Servers: memcached 1.6.18, quicksilver with its defaults (io_uring), on epoll, and with -t 1;
each with -c 20000. Prints KiB per connection, and RSS (KiB) before -> after closing.
"""
import argparse
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import rss_bytes, stats, wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QS = os.path.join(REPO, "target/release/quicksilver")


def connect(port, i):
    """Connection `i`, from one of eight loopback source addresses (the port chosen at connect,
    IP_BIND_ADDRESS_NO_PORT): loopback's ephemeral ports from one address run out near 28,000,
    fewer with the TIME_WAIT sockets of earlier runs."""
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.setsockopt(socket.IPPROTO_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT
    conn.bind((f"127.0.0.{2 + i % 8}", 0))
    conn.connect(("127.0.0.1", port))
    return conn




def start(command, port, limit):
    """The server on 127.0.0.1:`port`, answering, with room for `limit` connections."""
    server = subprocess.Popen(command + ["-p", str(port), "-l", "127.0.0.1", "-U", "0", "-c", str(limit)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return server


def run(command, port, count, silent):
    server = start(command, port, max(20000, count + 1000))
    try:
        time.sleep(0.3)
        before = rss_bytes(server.pid) // 1024
        held = []
        for i in range(count):
            conn = connect(port, i)
            if not silent:
                conn.sendall(b"version\r\n")
            held.append(conn)
        if not silent:
            for conn in held:
                conn.recv(64)
        # Every connection accepted (the one asking is one more).
        deadline = time.time() + 30
        while int(stats(port)["curr_connections"]) < count + 1 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        during = rss_bytes(server.pid) // 1024
        for conn in held:
            conn.close()
        # quicksilver gives memory back at its once-a-second check after closes.
        time.sleep(2.5)
        return (during - before) / count, before, rss_bytes(server.pid) // 1024
    finally:
        server.kill()
        server.wait()


def churn(command, port, seconds, memtier, warm, rounds=1):
    server = start(command, port, 20000)
    try:
        load = [memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "--hide-histogram",
                "--data-size-range=10-5000", "--key-maximum=100000"]
        subprocess.run(load + ["-t", "1", "-c", "10", "--ratio=1:0", "--key-pattern=P:P", "--requests=10000"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        churning = load + ["-t", "2", "-c", "25", "--reconnect-interval=3"]
        if warm:
            # The same traffic for 10 s first: the workers' buffer pools and the allocator's
            # arenas reach their working size, a fixed cost rather than growth.
            subprocess.run(churning + ["--test-time=10"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
        time.sleep(1.5)
        before = rss_bytes(server.pid) // 1024
        growth = []
        for _ in range(rounds):
            subprocess.run(churning + [f"--test-time={seconds}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            time.sleep(1.5)
            growth.append((rss_bytes(server.pid) // 1024 - before) / 1024)
        return growth
    finally:
        server.kill()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--churn", type=int, default=0, help="seconds of reconnecting load instead")
    parser.add_argument("--warm", action="store_true", help="with --churn: 10 s of the same load first")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --churn: this many periods of it, the growth since the start after each")
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--servers", default="memcached,quicksilver,quicksilver epoll,quicksilver -t 1")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(hard, args.count + 2000)
    try:
        # Root may raise the hard limit (up to fs.nr_open); the servers inherit it.
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    user = ["-u", "nobody"] if os.getuid() == 0 else []
    servers = [("memcached", ["memcached"] + user), ("quicksilver", [QS]),
               ("quicksilver epoll", [QS, "-o", "io_backend=epoll"]), ("quicksilver -t 1", [QS, "-t", "1"])]
    port = 27100
    for name, command in servers:
        if name not in args.servers.split(","):
            continue
        results = []
        for _ in range(args.runs):
            port += 1
            if args.churn:
                growth = churn(command, port, args.churn, args.memtier, args.warm, args.rounds)
                results.append(" -> ".join(f"{each:+.2f}" for each in growth) + " MiB")
                continue
            each, before, after = run(command, port, args.count, args.silent)
            results.append(f"{each:.2f} ({before}->{after})")
        what = "RSS growth under churn" if args.churn else "KiB/connection"
        print(f"{name:18} {what}: {'  '.join(results)}", flush=True)


if __name__ == "__main__":
    main()
