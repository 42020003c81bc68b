#!/usr/bin/env python3
"""EXEC over keys of several workers beside single-key traffic (issue 76): latency and
throughput, closed loop, from separate client processes (so Python's lock is not shared).

For each worker count: single-key GETs alone (one process, one connection, depth 1), then the
same GETs while two other processes run `MULTI / INCR a / INCR b / EXEC` over pairs of keys
the workers own apart (each EXEC borrows another worker's partitions), then EXECs alone. Each
phase runs SECONDS; p50 and p99 are of each request's round trip as the client measures it
(so a Python client's own cost, tens of µs, is in every figure: compare phases, not servers).
redis-server runs the same phases as the reference.

    scripts/bench-tx-latency.py                  -t 2 and -t 4, and redis-server
    scripts/bench-tx-latency.py --seconds 10
"""
import argparse
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, free_port, wait_port  # noqa: E402


def frame(*words):
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def client(port, kind, seconds, out):
    """Runs `kind` requests (get or exec) closed loop for `seconds`: latencies in µs."""
    sock = connect(port)
    pairs = [(b"{a%d}x" % i, b"{b%d}y" % i) for i in range(16)]
    gets = [frame(b"GET", b"single:%d" % i) for i in range(64)]
    execs = [frame(b"MULTI") + frame(b"INCR", a) + frame(b"INCR", b) + frame(b"EXEC") for a, b in pairs]
    # Lines a reply takes: a GET's hit (every key is set first); EXEC's +OK, two +QUEUED, and
    # an array of two integers.
    lines = 2 if kind == "get" else 6
    latencies = []
    end = time.monotonic() + seconds
    n = 0
    buf = b""
    while time.monotonic() < end:
        request = gets[n % len(gets)] if kind == "get" else execs[n % len(execs)]
        n += 1
        start = time.perf_counter_ns()
        sock.sendall(request)
        while buf.count(b"\r\n") < lines:
            buf += sock.recv(65536)
        buf = b""
        latencies.append((time.perf_counter_ns() - start) / 1000)
    out.put((kind, latencies))


def phase(port, kinds, seconds):
    """Runs one client process per kind at once: each kind's latencies."""
    queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=client, args=(port, kind, seconds, queue)) for kind in kinds]
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    return {kind: [lat for got, lats in results if got == kind for lat in lats] for kind in kinds}


def summary(latencies, seconds):
    latencies = sorted(latencies)
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return f"{len(latencies) / seconds:,.0f}/s p50 {pick(0.5):.0f} µs p99 {pick(0.99):.0f} µs"


def run(name, cmd, port, seconds):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        setup = connect(port)
        setup.sendall(b"".join(frame(b"SET", b"single:%d" % i, b"x" * 32) for i in range(64)))
        got = b""
        while got.count(b"\r\n") < 64:
            got += setup.recv(65536)
        rows = []
        rows.append(("GET alone", summary(phase(port, ["get"], seconds)["get"], seconds)))
        beside = phase(port, ["get", "exec", "exec"], seconds)
        rows.append(("GET beside 2 EXEC clients", summary(beside["get"], seconds)))
        rows.append(("EXEC (2 clients) beside GETs", summary(beside["exec"], seconds)))
        rows.append(("EXEC alone (2 clients)", summary(phase(port, ["exec", "exec"], seconds)["exec"], seconds)))
        for what, figures in rows:
            print(f"| {name} | {what} | {figures} |", flush=True)
    finally:
        proc.terminate()
        proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    binary = os.path.join(ROOT, "target", "release", "quicksilver")
    print("| server | phase | throughput, latency |\n|---|---|---|")
    for workers in ("2", "4"):
        port = free_port()
        cmd = [binary, "-t", workers, "-p", "0", "-U", "0", "-m", "256", "-l", f"proto[resp]:127.0.0.1:{port}"]
        run(f"quicksilver -t {workers}", cmd, port, args.seconds)
    if shutil.which("redis-server"):
        port = free_port()
        run("redis-server 7.0", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no"], port, args.seconds)


if __name__ == "__main__":
    main()
