#!/usr/bin/env python3
"""Hostile clients against memcached and quicksilver in one run (issue 56's patterns): each
server alone, started fresh for each pattern, its RSS read from /proc before the attack, at its
peak (VmHWM) and once it has settled, and a well-behaved client's p99 (set + get of a small
value) measured beside the attack once it is under way.

    scripts/bench-hostile.py [--quicksilver target/release/quicksilver] [--rounds 400]

Patterns (bounded, loopback only):
  half-set    -m 8: 200 connections each send `set kN 0 0 1048300` and all but one byte
  huge-set    -m 64 -I 32m: 10 connections each send all but one byte of a 30 MB value
  unread      -m 8, a 500 KB item: 150 connections (SO_RCVBUF 4 KiB) pipeline 3,000
              `get big big big big` and never read
  read-limit  -o read_buf_mem_limit=4 (quicksilver only): 150 connections half-send 1 MB
Each runs at -t 1 and with the default threads, and quicksilver on both I/O backends.
"""
import argparse
import os
import socket
import subprocess
import threading
import time

import benchlib


def start(program, args):
    port = benchlib.free_port()
    cmd = [program, "-p", str(port), "-l", "127.0.0.1", "-U", "0", *args]
    if os.path.basename(program) == "memcached" and os.getuid() == 0:
        cmd += ["-u", "nobody"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    benchlib.wait_port(port)
    return process, port


def half_send(port, count, head, body):
    socks = []
    for index in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head(index))
        socks.append(s)

    def send(s):
        s.settimeout(10)
        try:
            s.sendall(body)
        except OSError:
            pass

    threads = [threading.Thread(target=send, args=(s,)) for s in socks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return socks


def unread(port, count):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"set big 0 0 500000\r\n" + b"b" * 500000 + b"\r\n")
        s.recv(100)
    request = b"get big big big big\r\n" * 3000
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        try:
            s.send(request)
        except OSError:
            pass
        socks.append(s)
    return socks


def well_behaved_p99(port, rounds):
    times = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for round_ in range(rounds):
            value = b"v%d" % round_
            want = b"STORED\r\nVALUE good 0 %d\r\n%s\r\nEND\r\n" % (len(value), value)
            started = time.perf_counter()
            s.sendall(b"set good 0 0 %d\r\n%s\r\nget good\r\n" % (len(value), value))
            got = b""
            while len(got) < len(want):
                got += s.recv(4096)
            times.append(time.perf_counter() - started)
            assert got == want, got
    times.sort()
    return times[len(times) * 99 // 100]


PATTERNS = {
    "half-set": (["-m", "8"], lambda port: half_send(
        port, 200, lambda i: b"set k%d 0 0 1048300\r\n" % i, b"v" * 1048299)),
    "huge-set": (["-m", "64", "-I", "32m"], lambda port: half_send(
        port, 10, lambda i: b"set k%d 0 0 30000000\r\n" % i, b"v" * 29999999)),
    "unread": (["-m", "8"], lambda port: unread(port, 150)),
    "read-limit": (["-o", "read_buf_mem_limit=4"], lambda port: half_send(
        port, 150, lambda i: b"set k%d 0 0 1000000\r\n" % i, b"v" * 999999)),
}


def run(program, args, attack, rounds):
    process, port = start(program, args)
    try:
        before = benchlib.rss_bytes(process.pid)
        held = attack(port)
        time.sleep(1)
        p99 = well_behaved_p99(port, rounds)
        time.sleep(2.5)
        settled = benchlib.rss_bytes(process.pid)
        peak = benchlib.rss_bytes(process.pid, "VmHWM")
        for s in held:
            s.close()
        return before, peak, settled, p99
    finally:
        process.terminate()
        process.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quicksilver", default=os.path.join(benchlib.ROOT, "target/release/quicksilver"))
    parser.add_argument("--memcached", default="memcached")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    options = parser.parse_args()
    mib = 1 << 20
    print("| pattern | threads | server | RSS before | peak | settled | well-behaved p99 |")
    print("|---|---|---|---|---|---|---|")
    for name in options.patterns.split(","):
        args, attack = PATTERNS[name]
        for threads in (["-t", "1"], []):
            servers = [("memcached", options.memcached, [])] if name != "read-limit" else []
            servers += [(f"quicksilver {backend}", options.quicksilver, ["-o", f"io_backend={backend}"])
                        for backend in ("uring", "epoll")]
            for label, program, extra in servers:
                before, peak, settled, p99 = run(program, args + threads + extra, attack, options.rounds)
                print(f"| {name} | {threads[1] if threads else 'default'} | {label} | {before / mib:.1f} MiB "
                      f"| {peak / mib:.1f} MiB | {settled / mib:.1f} MiB | {p99 * 1000:.2f} ms |", flush=True)


if __name__ == "__main__":
    main()
