#!/usr/bin/env python3
"""Two quicksilver builds side by side under memtier_benchmark: server CPU per request, the
builds interleaved round by round so drift hits both alike. Each server runs one worker
pinned to core 0 (`-t 1`), memtier runs on core 1: one thread, 50 connections, 1 set to 19
gets over 100,000 preloaded keys of 32 bytes (or --keys of --data-size), at each pipeline depth. CPU is the server's
utime + stime from /proc/PID/stat over the measured run; requests are cmd_get + cmd_set.

    scripts/bench-ab.py BEFORE AFTER [--memtier PATH] [--rounds 3] [--depths 1,16] [--seconds 5]
        [--data-size 32] [--keys 100000] [--before-options "..."] [--after-options "..."]

BEFORE and AFTER may be the same build with different options, e.g. the io_uring backend
against epoll: scripts/bench-ab.py B B --after-options "-o io_backend=uring".
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_seconds, free_port, stats, wait_port  # noqa: E402

def requests(port):
    fields = stats(port)
    return int(fields["cmd_get"]) + int(fields["cmd_set"])


def measure(binary, options, memtier, depth, load):
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", "0", binary, "-t", "1", "-p", str(port), "-l", "127.0.0.1", "-U", "0"]
                              + options, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        common = ["taskset", "-c", "1", memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
                  "-t", "1", "-c", "50", "-d", str(load.data_size), f"--key-maximum={load.keys}", "--hide-histogram"]
        subprocess.run(common + ["--ratio", "1:0", "--key-pattern", "P:P", "-n", str(load.keys // 50)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        ops0, cpu0 = requests(port), cpu_seconds(server.pid)
        subprocess.run(common + ["--ratio", "1:19", "--key-pattern", "R:R", "--pipeline", str(depth),
                                 "--test-time", str(load.seconds)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        ops1, cpu1 = requests(port), cpu_seconds(server.pid)
        return (ops1 - ops0), (cpu1 - cpu0)
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depths", default="1,16")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--before-options", default="", help="server options of BEFORE")
    parser.add_argument("--after-options", default="", help="server options of AFTER")
    parser.add_argument("--data-size", type=int, default=32, help="value bytes")
    parser.add_argument("--keys", type=int, default=100_000, help="keys, all preloaded")
    args = parser.parse_args()
    options = {"before": args.before_options.split(), "after": args.after_options.split()}
    for depth in [int(d) for d in args.depths.split(",")]:
        totals = {"before": [0, 0.0], "after": [0, 0.0]}
        for round_ in range(args.rounds):
            order = [("before", args.before), ("after", args.after)]
            if round_ % 2:
                order.reverse()
            for name, binary in order:
                ops, cpu = measure(binary, options[name], args.memtier, depth, args)
                totals[name][0] += ops
                totals[name][1] += cpu
                print(f"depth {depth:2} round {round_ + 1} {name:6}: {ops / args.seconds:10.0f} req/s, "
                      f"{cpu * 1e6 / max(ops, 1):6.3f} us CPU/request", flush=True)
        per = {name: cpu * 1e6 / max(ops, 1) for name, (ops, cpu) in totals.items()}
        print(f"depth {depth:2}: CPU per request after/before = {per['after'] / per['before']:.3f} "
              f"({per['before']:.3f} -> {per['after']:.3f} us)", flush=True)


if __name__ == "__main__":
    main()
