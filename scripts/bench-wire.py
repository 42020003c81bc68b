#!/usr/bin/env python3
"""memtier_benchmark and qs-bench on the same workload, against quicksilver and memcached, with
what each generator's traffic costs each server on the wire: does qs-bench measure what an
independent generator measures, and if not, why?

Workload (both generators): 50 connections from one thread on core 1, `depth` requests in
flight per connection, 100,000 keys each generator has preloaded, 32-byte values, 1 set to 19
gets, uniform keys; both servers run one worker on core 0. For each run, over the same 3 s
window, from the servers' side only: operations (cmd_get + cmd_set from `stats`), server CPU
(/proc/PID/stat), server system calls by kind (perf's syscall tracepoints on the server's PID)
and TCP segments (nstat's TcpInSegs: on loopback each segment is counted once). Rounds
interleave the generators and servers so drift hits all alike. qs-bench runs two ways: closed
loop as fast as it goes (its default), and open loop at the rate memtier reached against the same
server at the same depth (`--rate`, "open"), so that both offer the same load.

    scripts/bench-wire.py [--memtier PATH] [--rounds 2] [--depths 16,1]

memtier_benchmark: scripts/build-memtier.sh. perf: Debian's linux-perf (tracepoints only).
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = 100_000
EVENTS = ["raw_syscalls:sys_enter", "syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom",
          "syscalls:sys_enter_sendmsg", "syscalls:sys_enter_sendto", "syscalls:sys_enter_epoll_wait"]


def _bench_memtier():
    # The measurements bench-memtier.py makes (its name has a dash: loaded by path).
    spec = importlib.util.spec_from_file_location("bench_memtier", os.path.join(REPO, "scripts/bench-memtier.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MEASURE = _bench_memtier()
cpu_seconds = _MEASURE.cpu_seconds
server_ops = _MEASURE.ops


def segments():
    out = subprocess.run(["nstat", "-az", "TcpInSegs"], capture_output=True, text=True).stdout
    return int(re.search(r"TcpInSegs\s+(\d+)", out).group(1))


def memtier(args, port, extra):
    return ["taskset", "-c", "1", args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
            "-t", "1", "-c", "50", "-d", "32", "--key-maximum", str(KEYS), "--hide-histogram"] + extra


def qs_bench(args, port, extra):
    return [args.qs_bench, "run", "--server", f"127.0.0.1:{port}", "--protocol", "text", "--connections", "50",
            "--value-size", "32", "--keys", str(KEYS), "--get-ratio", "0.95", "--cores", "1", "--quiet"] + extra


def generator(args, name, port, depth, seconds, rate=None):
    if name == "qs-bench open":
        # Open loop (Poisson arrivals, at most `depth` in flight per connection) at the rate
        # memtier reached against this server at this depth: the same load, so the same server
        # cost if the generators agree.
        return qs_bench(args, port, ["--no-load", "--depth", str(depth), "--duration", str(seconds),
                                     "--warmup", "0", "--rate", str(int(rate))])
    if name == "memtier":
        return memtier(args, port, ["--ratio", "1:19", "--key-pattern", "R:R", "--pipeline", str(depth),
                                    "--test-time", str(seconds)])
    return qs_bench(args, port, ["--no-load", "--depth", str(depth), "--duration", str(seconds), "--warmup", "0"])


def measure(pid, port, command, window=3.0):
    """Runs `command` and measures the server over `window` seconds in the middle of its run."""
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    ops0, cpu0, seg0 = server_ops(port), cpu_seconds(pid), segments()
    perf = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(EVENTS), "-p", str(pid), "--", "sleep", str(window)],
                          capture_output=True, text=True).stderr
    ops1, cpu1, seg1 = server_ops(port), cpu_seconds(pid), segments()
    run.wait()
    ops = max(ops1 - ops0, 1)
    figures = {"ops/s": ops / window, "cpu us/op": (cpu1 - cpu0) * 1e6 / ops, "segments/op": (seg1 - seg0) / ops}
    counts = {}
    for line in perf.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].isdigit():
            counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
    figures["syscalls/op"] = counts.get("sys_enter", 0) / ops
    figures["reads/op"] = (counts.get("read", 0) + counts.get("recvfrom", 0)) / ops
    figures["sends/op"] = (counts.get("sendmsg", 0) + counts.get("sendto", 0)) / ops
    figures["epoll_waits/op"] = counts.get("epoll_wait", 0) / ops
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--qs-bench", default=os.path.join(REPO, "target/release/qs-bench"))
    parser.add_argument("--quicksilver", default=os.path.join(REPO, "target/release/quicksilver"))
    parser.add_argument("--memcached", default="memcached")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--depths", default="16,1")
    parser.add_argument("--generators", default="memtier,qs-bench,qs-bench open",
                        help="memtier; qs-bench (closed loop, as fast as it goes); qs-bench open (open loop "
                             "at the rate memtier reached in its row)")
    args = parser.parse_args()
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    servers = {
        "quicksilver": (["taskset", "-c", "0", args.quicksilver, "-t", "1", "-m", "1024", "-p", "22181",
                         "-l", "127.0.0.1"], 22181),
        "memcached": (["taskset", "-c", "0", args.memcached, "-t", "1", "-m", "1024", "-p", "22182",
                       "-l", "127.0.0.1", "-U", "0"] + user, 22182),
    }
    procs = {name: (subprocess.Popen(command), port) for name, (command, port) in servers.items()}
    try:
        time.sleep(1.0)
        for name, (proc, port) in procs.items():
            # Each generator's own keys: memtier's `memtier-N`, qs-bench's.
            subprocess.run(memtier(args, port, ["--ratio", "1:0", "--key-pattern", "P:P", "-n", str(KEYS // 50)]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            subprocess.run(qs_bench(args, port, ["--depth", "16", "--duration", "0.1", "--warmup", "0"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        print("| depth | generator | server | ops/s | server CPU us/op | TCP segments/op | syscalls/op | "
              "reads/op | sends/op | epoll_waits/op |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        reached = {}
        for _ in range(args.rounds):
            for depth in [int(d) for d in args.depths.split(",")]:
                # The generators back to back against each server, so that drift between them is
                # small (this machine's speed moves by a third over minutes).
                for name, (proc, port) in procs.items():
                    for gen in args.generators.split(","):
                        f = measure(proc.pid, port, generator(args, gen, port, depth, 5, reached.get((depth, name))))
                        if gen == "memtier":
                            reached[(depth, name)] = f["ops/s"]
                        print(f"| {depth} | {gen} | {name} | {f['ops/s']:,.0f} | {f['cpu us/op']:.2f} | "
                              f"{f['segments/op']:.2f} | {f['syscalls/op']:.2f} | {f['reads/op']:.2f} | "
                              f"{f['sends/op']:.2f} | {f['epoll_waits/op']:.2f} |", flush=True)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
