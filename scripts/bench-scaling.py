#!/usr/bin/env python3
"""How each server scales across cores (MICA's central claim, issue 57): each server pinned to
W cores, memtier_benchmark on the cores after them, W = 1, 2, 4, 8 as the machine allows; 95%
and 50% gets, uniform and zipf keys, pipeline depth 1 and 16. For each point: requests per
second and the server's CPU per request (utime + stime from /proc over the measured run).

    scripts/bench-scaling.py [--workers 1,2,4,8] [--seconds 5] [--depths 1,16]
        [--quicksilver target/release/quicksilver] [--memcached memcached]
        [--pogocache PATH] [--segcache PATH] [--memtier PATH] [--out scaling.json]
        [--plot scaling.svg]

Servers: memcached -t W, quicksilver -t W, and, where a binary is given (or pogocache is on
PATH), pogocache --threads W and Pelikan Segcache with W worker threads (its shipped settings
in a config file written per W, as `qs-bench memtier` writes it). It brings nothing from the
network: every binary is a path (the lent 16-core machine has no package registry; copy them
with their shared libraries and set LD_LIBRARY_PATH). memtier runs with as many threads as it
has cores (at most W), 25 connections each, 100,000 keys of 32 bytes preloaded; requests are
memtier's own count (Segcache answers no `stats`). Writes a Markdown table to stdout, every
point to --out (JSON), and with --plot an SVG of requests/s against W, a panel per workload
(`qs-bench scaling-plot`, plotters; the JSON can be drawn later on another machine too).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, cpu_seconds, free_port, wait_port  # noqa: E402

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
    if name == "segcache":
        return [binary, segcache_config(workers, port)]
    raise ValueError(name)


def segcache_config(workers, port, heap_mib=1024):
    """Segcache's shipped config/segcache.toml with this run's port, heap and W workers (as
    crates/bench/src/memtier.rs writes it for one)."""
    admin = free_port()
    hash_power = 22 + max(1, heap_mib // 64).bit_length() - 1
    text = (f'daemonize = false\n[admin]\nhost = "127.0.0.1"\nport = "{admin}"\nhttp_enabled = false\n'
            f'[server]\nhost = "127.0.0.1"\nport = "{port}"\ntimeout = 100\nnevent = 1024\n'
            f'[worker]\ntimeout = 100\nnevent = 1024\nthreads = {workers}\n'
            f'[seg]\nhash_power = {hash_power}\nheap_size = "{heap_mib}MB"\nsegment_size = "1MB"\n'
            'compact_target = 2\nmerge_target = 4\nmerge_max = 8\neviction = "Merge"\n'
            '[time]\ntime_type = "Memcache"\n[buf]\n[debug]\nlog_level = "error"\n')
    path = os.path.join(tempfile.gettempdir(), f"qs-scaling-segcache-{os.getpid()}-{port}.toml")
    with open(path, "w") as config:
        config.write(text)
    return path


def memtier_count(path):
    """The requests a memtier run made (its JSON report's totals)."""
    with open(path) as report:
        return int(json.load(report)["ALL STATS"]["Totals"]["Count"])


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
        report = os.path.join(tempfile.gettempdir(), f"qs-scaling-memtier-{os.getpid()}-{port}.json")
        cpu_before, started = cpu_seconds(server.pid), time.monotonic()
        subprocess.run(common + ["--ratio", mix, "--key-pattern", pattern, "--pipeline", str(depth),
                                 "--test-time", str(seconds), "--json-out-file", report],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        elapsed = time.monotonic() - started
        requests, cpu = memtier_count(report), cpu_seconds(server.pid) - cpu_before
        os.remove(report)
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
    parser.add_argument("--segcache", help="Pelikan Segcache's binary (pelikan-segcache)")
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--out", default="scaling.json")
    parser.add_argument("--plot", help="an SVG of requests/s against W (needs qs-bench beside quicksilver)")
    options = parser.parse_args()
    available = len(os.sched_getaffinity(0))
    servers = [(name, path) for name, path in
               (("memcached", options.memcached), ("quicksilver", options.quicksilver),
                ("pogocache", options.pogocache), ("segcache", options.segcache)) if path]
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
    if options.plot:
        bench = os.path.join(os.path.dirname(os.path.abspath(options.quicksilver)), "qs-bench")
        subprocess.run([bench, "scaling-plot", "--input", options.out, "--out", options.plot], check=True)


if __name__ == "__main__":
    main()
