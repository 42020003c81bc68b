#!/usr/bin/env python3
"""The floor under memtier_benchmark: what a server that does no work at all costs under the
same traffic as quicksilver and memcached (issue 27, parts 2 and 3).

`qs-bench probe-echo --answer end` is a bare server answering `END` (a miss) to every request
line, in three kinds: `epoll` (readiness, one read and one write per ready connection, what
quicksilver and memcached do), `uring` (io_uring: a receive posted per connection, one
`io_uring_enter` per loop turn for every send and re-posted receive) and `uring-multishot`
(io_uring with multishot receives into a provided-buffer ring and registered files). memtier
sends gets only (`--ratio 0:1`), so every server answers the same misses.

Two measurements, rounds interleaving the servers:

    scripts/bench-floor.py pinned [--rounds 4] [--depth 1]
        one worker on core 0, memtier on core 1 (`-t 1 -c 50`): server CPU per operation
        (/proc utime+stime over 3 s in the middle of a 5 s run; operations from memtier).

    scripts/bench-floor.py idle [--rounds 2]
        pinned as above at depth 1, with 50 active connections alone, 50 active beside 4,950
        idle ones, and 500 active beside 4,500 idle (5,000, 10% active): what an idle
        connection costs a turn.

    scripts/bench-floor.py defaults [--rounds 2] [--ratio '']
        every server with its defaults, nothing pinned, memtier with its defaults (4 threads x
        50 connections, depth 1; with `--ratio ''` its default 1 set to 10 gets too): ops/s,
        latency and server CPU per operation as a user's first run sees them.

memtier_benchmark: scripts/build-memtier.sh.
"""
import argparse
import importlib.util
import os
import re
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECHO_KINDS = ["epoll", "uring", "uring-multishot"]


def _bench_memtier():
    # The measurements bench-memtier.py makes (its name has a dash: loaded by path).
    spec = importlib.util.spec_from_file_location("bench_memtier", os.path.join(REPO, "scripts/bench-memtier.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MEASURE = _bench_memtier()


def server_command(args, kind, port, pinned):
    if kind == "memcached":
        user = ["-u", "nobody"] if os.getuid() == 0 else []
        command = [args.memcached, "-p", str(port), "-U", "0", "-l", "127.0.0.1"] + user
        command += ["-t", "1", "-m", "1024"] if pinned else []
    elif kind.startswith("quicksilver"):
        # quicksilver-uring / quicksilver-epoll: that backend; quicksilver-tN: N workers.
        command = [args.quicksilver, "-p", str(port), "-U", "0", "-l", "127.0.0.1"]
        command += ["-t", "1", "-m", "1024"] if pinned else []
        backend = kind.removeprefix("quicksilver-")
        command += ["-o", f"io_backend={backend}"] if backend in ("uring", "epoll") else []
        command += ["-t", backend[1:]] if re.fullmatch(r"t[0-9]+", backend) else []
    elif kind == "pogocache":
        command = [args.pogocache, "-h", "127.0.0.1", "-p", str(port)]
        command += ["--threads", "1", "--maxmemory", "1gb"] if pinned else []
    elif kind == "segcache":
        command = [args.segcache, segcache_config(port, pinned)]
    else:
        command = [args.qs_bench, "probe-echo", "--io", kind, "--answer", "end", "--port", str(port)]
    return (["taskset", "-c", "0"] if pinned else []) + command


def segcache_config(port, pinned):
    """Pelikan Segcache's shipped config (config/segcache.toml: one worker, 4 GB heap), on this
    port and loopback; pinned, a 1 GB heap as the other servers have."""
    lines = [
        "daemonize = false",
        "[admin]", 'host = "127.0.0.1"', f'port = "{port + 10000}"', "http_enabled = false",
        "[server]", 'host = "127.0.0.1"', f'port = "{port}"', "timeout = 100", "nevent = 1024",
        "[worker]", "timeout = 100", "nevent = 1024", "threads = 1",
        "[seg]", "hash_power = 22", f'heap_size = "{"1GB" if pinned else "4GB"}"', 'segment_size = "1MB"',
        "compact_target = 2", "merge_target = 4", "merge_max = 8", 'eviction = "Merge"',
        "[time]", 'time_type = "Memcache"', "[buf]", "[debug]", 'log_level = "error"',
    ]
    path = f"/tmp/qs-bench-segcache-{port}.toml"
    with open(path, "w") as config:
        config.write("\n".join(lines) + "\n")
    return path


def memtier(args, port, extra):
    ratio = ["--ratio", args.ratio] if args.ratio else []
    return [args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "--hide-histogram"] + ratio + extra


def totals(output):
    """memtier's Totals line: ops/s, average, p50 and p99 latency (ms)."""
    fields = re.search(r"^Totals\s+(.*)$", output, re.M).group(1).split()
    return float(fields[0]), float(fields[3]), float(fields[4]), float(fields[5])


def hold_idle(port, count):
    """Opens `count` connections to the server and leaves them idle (each has said `version`
    once, as a client checking its pool would); the caller closes them."""
    import resource
    import socket
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(b"version\r\n")
        held.append(conn)
    for conn in held:
        conn.recv(64)
    return held


def pinned_point(args, kind, port, active=50, idle=0, depth=1):
    """One worker on core 0, memtier on core 1 (one thread, `active` connections at `depth`)
    while `idle` more connections stay open and silent: ops/s, and server CPU per operation
    (/proc utime+stime over 3 s in the middle of a 5 s run)."""
    command = server_command(args, kind, port, True)
    if idle and kind not in ("pogocache", "segcache"):
        command += ["-c", str(active + idle + 100)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held = []
    try:
        _MEASURE.wait_port(port)
        held = hold_idle(port, idle)
        load = subprocess.Popen(["taskset", "-c", "1"] + memtier(args, port, [
            "-t", "1", "-c", str(active), "-d", "32", "--key-maximum", "100000", "--key-pattern", "R:R",
            "--pipeline", str(depth), "--test-time", "5"]), stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        time.sleep(1.0)
        cpu0, t0 = _MEASURE.cpu_seconds(server.pid), time.time()
        time.sleep(3.0)
        cpu1, t1 = _MEASURE.cpu_seconds(server.pid), time.time()
        rate = totals(load.communicate()[0])[0]
        return rate, (cpu1 - cpu0) / (t1 - t0) / rate * 1e6
    finally:
        for conn in held:
            conn.close()
        server.kill()
        server.wait()


def defaults_point(args, kind, port):
    server = subprocess.Popen(server_command(args, kind, port, False), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _MEASURE.wait_port(port)
        cpu0 = _MEASURE.cpu_seconds(server.pid)
        out = subprocess.run(memtier(args, port, ["--test-time", "5", "--print-percentiles", "50,99"]),
                             capture_output=True, text=True, check=True).stdout
        cpu = _MEASURE.cpu_seconds(server.pid) - cpu0
        rate, average, p50, p99 = totals(out)
        return rate, average, p50, p99, cpu / (rate * 5) * 1e6
    finally:
        server.kill()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["pinned", "defaults", "idle"])
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--quicksilver", default=os.path.join(REPO, "target/release/quicksilver"))
    parser.add_argument("--qs-bench", default=os.path.join(REPO, "target/release/qs-bench"))
    parser.add_argument("--memcached", default="memcached")
    parser.add_argument("--pogocache", default=os.path.expanduser("~/.cache/servers/pogocache/pogocache"))
    parser.add_argument("--segcache",
                        default=os.path.expanduser("~/.cache/servers/pelikan-target/release/pelikan-segcache"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--depth", type=int, default=1)
    parser.add_argument("--ratio", default="0:1",
                        help="memtier's set:get ratio; empty for memtier's own default (1:10)")
    parser.add_argument("--servers", default=",".join(["memcached", "quicksilver"] + ECHO_KINDS))
    args = parser.parse_args()
    port = 24100
    for round_ in range(args.rounds):
        for kind in args.servers.split(","):
            port += 1
            if args.mode == "idle":
                for active, idle in [(50, 0), (50, 4950), (500, 4500)]:
                    port += 1
                    rate, cpu = pinned_point(args, kind, port, active, idle)
                    print(f"round {round_} {kind:16} active {active:4} idle {idle:5} {rate:9,.0f} ops/s "
                          f"{cpu:6.2f} us CPU/op", flush=True)
            elif args.mode == "pinned":
                rate, cpu = pinned_point(args, kind, port, depth=args.depth)
                print(f"round {round_} depth {args.depth} {kind:16} {rate:9,.0f} ops/s {cpu:6.2f} us CPU/op", flush=True)
            else:
                rate, average, p50, p99, cpu = defaults_point(args, kind, port)
                print(f"round {round_} {kind:16} {rate:9,.0f} ops/s  latency avg {average:.2f} p50 {p50:.2f} "
                      f"p99 {p99:.2f} ms  server {cpu:.2f} us CPU/op", flush=True)


if __name__ == "__main__":
    main()
