#!/usr/bin/env python3
"""How each server scales across cores (MICA's central claim, issue 57): each server pinned to
W cores, memtier_benchmark on the cores after them, W = 1, 2, 4, 8 as the machine allows; 95%
and 50% gets, uniform and zipf keys, pipeline depth 1 and 16. For each point: requests per
second and the server's CPU per request (utime + stime from /proc over the measured run).

    scripts/bench-scaling.py [--workers 1,2,4,8] [--seconds 5] [--depths 1,16]
        [--quicksilver target/release/quicksilver] [--memcached memcached]
        [--pogocache PATH] [--memtier PATH] [--out scaling.json]

Servers: memcached -t W, quicksilver -t W, pogocache --threads W where a binary is given or
found on PATH (Segcache is not driven yet: it needs a config file per W). It brings
nothing from the network: every binary is a path (the lent 16-core machine has no package
registry; copy them with their shared libraries and set LD_LIBRARY_PATH). memtier runs with as
many threads as it has cores (at most W), 25 connections each, 100,000 keys of 32 bytes
preloaded. Writes a Markdown table to stdout and every point to --out (JSON).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, cpu_seconds, free_port, stats, wait_port  # noqa: E402

KEYS = 100_000
MIXES = {"95% gets": "1:19", "50% gets": "1:1"}
PATTERNS = {"uniform": "R:R", "zipf": "Z:Z"}


def cores(first, count):
    return ",".join(str(core) for core in range(first, first + count))


def server_command(name, binary, workers, port):
    if name == "memcached":
        command = [binary, "-t", str(workers), "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "1024"]
        return command + (["-u", "nobody"] if os.getuid() == 0 else [])
    if name == "quicksilver":
        return [binary, "-t", str(workers), "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "1024"]
    if name == "pogocache":
        return [binary, "--threads", str(workers), "-p", str(port), "-h", "127.0.0.1"]
    raise ValueError(name)


def served(port):
    fields = stats(port)
    return int(fields.get("cmd_get", 0)) + int(fields.get("cmd_set", 0))


def point(name, binary, workers, memtier, client_cores, mix, pattern, depth, seconds):
    """One server at one point: (requests/s, server µs of CPU per request)."""
    port = free_port()
    command = ["taskset", "-c", cores(0, workers)] + server_command(name, binary, workers, port)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        threads = max(1, min(workers, len(client_cores.split(","))))
        common = ["taskset", "-c", client_cores, memtier, "-s", "127.0.0.1", "-p", str(port),
                  "-P", "memcache_text", "-t", str(threads), "-c", "25", "-d", "32",
                  f"--key-maximum={KEYS}", "--hide-histogram"]
        subprocess.run(common + ["--ratio", "1:0", "--key-pattern", "P:P", "-n", str(KEYS // (25 * threads) + 1)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        before, cpu_before, started = served(port), cpu_seconds(server.pid), time.monotonic()
        subprocess.run(common + ["--ratio", mix, "--key-pattern", pattern, "--pipeline", str(depth),
                                 "--test-time", str(seconds)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        elapsed = time.monotonic() - started
        requests, cpu = served(port) - before, cpu_seconds(server.pid) - cpu_before
        return requests / elapsed, cpu * 1e6 / max(requests, 1)
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--depths", default="1,16")
    parser.add_argument("--mixes", default=",".join(MIXES))
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--quicksilver", default=os.path.join(ROOT, "target/release/quicksilver"))
    parser.add_argument("--memcached", default=shutil.which("memcached"))
    parser.add_argument("--pogocache", default=shutil.which("pogocache"))
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--out", default="scaling.json")
    options = parser.parse_args()
    available = len(os.sched_getaffinity(0))
    servers = [(name, path) for name, path in
               (("memcached", options.memcached), ("quicksilver", options.quicksilver),
                ("pogocache", options.pogocache)) if path]
    points = []
    print(f"{available} cores; servers: {', '.join(name for name, _ in servers)}")
    print("| W | mix | keys | depth | server | requests/s | server CPU µs/request |")
    print("|---|---|---|---|---|---|---|")
    for workers in (int(w) for w in options.workers.split(",")):
        if workers >= available:
            print(f"W={workers}: skipped, {available} cores leave none for memtier", file=sys.stderr)
            continue
        client_cores = cores(workers, min(workers, available - workers))
        for mix in options.mixes.split(","):
            for pattern in options.patterns.split(","):
                for depth in (int(d) for d in options.depths.split(",")):
                    for name, binary in servers:
                        rate, cpu = point(name, binary, workers, options.memtier, client_cores,
                                          MIXES[mix], PATTERNS[pattern], depth, options.seconds)
                        points.append({"workers": workers, "mix": mix, "keys": pattern, "depth": depth,
                                       "server": name, "requests_per_sec": rate, "cpu_us_per_request": cpu})
                        print(f"| {workers} | {mix} | {pattern} | {depth} | {name} | {rate:,.0f} | {cpu:.2f} |",
                              flush=True)
    with open(options.out, "w") as out:
        json.dump({"cores": available, "points": points}, out, indent=1)


if __name__ == "__main__":
    main()
