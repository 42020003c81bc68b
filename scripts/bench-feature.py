#!/usr/bin/env python3
"""What counting hot keys (`stats hotkeys`) or sampling the live miss-ratio curve (`stats mrc`)
costs the server: one quicksilver worker on core 0, memtier_benchmark on core 1 (`-P memcache_text
-t 1 -c 50 -d 32`, 100,000 keys preloaded, 1 set to 19 gets, uniform or zipf-like keys), server
CPU per operation (/proc) and operations (`stats`), with the feature on and off (`stats hotkeys
on|off` or `stats mrc on|off` on the same server), interleaved.

    scripts/bench-feature.py [--feature hotkeys|mrc] [--rounds 4] [--depths 16,1] [--pattern R:R]
"""
import argparse
import importlib.util
import os
import socket
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("bench_memtier", os.path.join(REPO, "scripts/bench-memtier.py"))
MEASURE = importlib.util.module_from_spec(spec)
spec.loader.exec_module(MEASURE)


def command(port, line):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(line.encode() + b"\r\n")
        assert s.recv(100) == b"OK\r\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--quicksilver", default=os.path.join(REPO, "target/release/quicksilver"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--depths", default="16,1")
    parser.add_argument("--pattern", default="R:R", help="memtier --key-pattern (G:G for gaussian)")
    parser.add_argument("--feature", default="hotkeys", choices=["hotkeys", "mrc"])
    args = parser.parse_args()
    args.connections, args.keys, args.seconds = 50, 100_000, 4
    port = 22191
    server = subprocess.Popen(["taskset", "-c", "0", args.quicksilver, "-t", "1", "-p", str(port),
                               "-l", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        MEASURE.wait_port(port)
        results = {}
        for round_ in range(args.rounds):
            for depth in [int(d) for d in args.depths.split(",")]:
                # Alternate which goes first, so that an order effect shows as spread, not bias.
                for state in (["on", "off"] if round_ % 2 == 0 else ["off", "on"]):
                    command(port, f"stats {args.feature} {state}")
                    MEASURE.memtier(args, port, "memcache_text", ["--ratio", "1:0", "--key-pattern", "P:P",
                                                                   "-n", str(args.keys // args.connections)])
                    ops0, cpu0 = MEASURE.ops(port), MEASURE.cpu_seconds(server.pid)
                    MEASURE.memtier(args, port, "memcache_text", ["--ratio", "1:19", "--key-pattern", args.pattern,
                                                                   "--pipeline", str(depth), "--test-time",
                                                                   str(args.seconds)])
                    ops1, cpu1 = MEASURE.ops(port), MEASURE.cpu_seconds(server.pid)
                    cpu = (cpu1 - cpu0) / max(ops1 - ops0, 1) * 1e6
                    results.setdefault((depth, state), []).append(cpu)
                    print(f"depth {depth} {args.feature} {state}: {cpu:.3f} us CPU/op", flush=True)
        for depth in [int(d) for d in args.depths.split(",")]:
            on, off = results[(depth, "on")], results[(depth, "off")]
            ratios = [a / b for a, b in zip(on, off)]
            print(f"depth {depth}: on/off CPU per op {', '.join(f'{r:.3f}' for r in ratios)} "
                  f"(median {sorted(ratios)[len(ratios) // 2]:.3f})")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
