#!/usr/bin/env python3
"""memtier_benchmark (RedisLabs' independent load generator) against quicksilver and memcached,
over memcached's text and binary protocols: the cross-check of qs-bench's figures.

Both servers run one worker thread on core 0, memtier on core 1. Each point preloads the keys,
then runs memtier for --seconds; the figures come from the servers themselves: operations from
`stats` (cmd_get + cmd_set) and CPU from /proc/PID/stat, sampled around the run, so neither
generator's own report is trusted. Rounds interleave the servers so drift hits both alike.

    scripts/bench-memtier.py [--memtier PATH] [--rounds 3] [--seconds 4]
        [--protocols memcache_text,memcache_binary] [--depths 1,16] [--ratios 1:19]

With more than one --ratios (memtier's set:get), each server's rows are printed per ratio, so
writes and reads can be compared on the wire (e.g. --ratios 1:19,1:1).

memtier_benchmark is built outside the repository by scripts/build-memtier.sh (into
~/.cache/memtier/src, this script's default --memtier).
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_seconds, stats, wait_port  # noqa: E402



def ops(port):
    figures = stats(port)
    return int(figures["cmd_get"]) + int(figures["cmd_set"])



def memtier(args, port, protocol, extra):
    command = ["taskset", "-c", "1", args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", protocol,
               "-t", "1", "-c", str(args.connections), "-d", "32", "--key-maximum", str(args.keys),
               "--hide-histogram"] + extra
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def point(args, name, pid, port, protocol, depth, ratio="1:19"):
    memtier(args, port, protocol, ["--ratio", "1:0", "--key-pattern", "P:P", "-n", str(args.keys // args.connections)])
    ops0, cpu0, t0 = ops(port), cpu_seconds(pid), time.time()
    memtier(args, port, protocol, ["--ratio", ratio, "--key-pattern", "R:R", "--pipeline", str(depth),
                                   "--test-time", str(args.seconds)])
    ops1, cpu1, t1 = ops(port), cpu_seconds(pid), time.time()
    done = ops1 - ops0
    return done / (t1 - t0), (cpu1 - cpu0) / max(done, 1) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--quicksilver", default="target/release/quicksilver")
    parser.add_argument("--memcached", default="memcached")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--protocols", default="memcache_text,memcache_binary")
    parser.add_argument("--depths", default="1,16")
    parser.add_argument("--ratios", default="1:19")
    args = parser.parse_args()
    protocols = args.protocols.split(",")
    depths = [int(depth) for depth in args.depths.split(",")]
    ratios = args.ratios.split(",")
    user = ["-u", "nobody"] if os.getuid() == 0 else []
    servers = {
        "quicksilver": (["taskset", "-c", "0", args.quicksilver, "-t", "1", "-p", "22171", "-l", "127.0.0.1"], 22171),
        "memcached": (["taskset", "-c", "0", args.memcached, "-t", "1", "-p", "22172", "-l", "127.0.0.1"] + user, 22172),
    }
    procs = {}
    try:
        for name, (command, port) in servers.items():
            procs[name] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(port)
        results = {}
        for _ in range(args.rounds):
            for protocol in protocols:
                for depth in depths:
                    for ratio in ratios:
                        for name, (_, port) in servers.items():
                            rate, cpu = point(args, name, procs[name].pid, port, protocol, depth, ratio)
                            results.setdefault((name, protocol, depth, ratio), []).append((rate, cpu))
                            print(f"{name} {protocol} depth {depth} set:get {ratio}: {rate:,.0f} ops/s, "
                                  f"{cpu:.3f} us CPU/op", flush=True)
        header = "".join(f" depth {depth} ops/s | depth {depth} CPU/op |" for depth in depths)
        print(f"\n| server, protocol, set:get |{header}")
        print("|---|" + "---|---|" * len(depths))
        median = lambda values: sorted(values)[len(values) // 2]
        for name in servers:
            for protocol in protocols:
                for ratio in ratios:
                    cells = []
                    for depth in depths:
                        runs = results[(name, protocol, depth, ratio)]
                        cells += [f"{median([r for r, _ in runs]):,.0f}", f"{median([c for _, c in runs]):.2f} us"]
                    print(f"| {name}, {protocol}, {ratio} | " + " | ".join(cells) + " |")
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
