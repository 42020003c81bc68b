#!/usr/bin/env python3
"""The flash tier side by side (issue 26): quicksilver -o ext_path against memcached 1.6's
extstore at the same DRAM and flash sizes, and quicksilver with ten times the DRAM and no flash
(the hit ratio the tier should match), under memtier_benchmark: values of 1-4 KiB, a working
set ten times DRAM, zipf 0.99 and uniform keys, 1 set in 10.

Each server runs on core 0 (all its threads: workers, flash readers, memcached's extstore
threads), memtier on core 1. Per point: start the server, preload every key once (memtier's
P:P pattern), run memtier for --seconds, stop the server. Figures come from the servers:
hit ratio from `stats` get_hits/get_misses around the run, CPU per operation from
/proc/PID/stat; throughput and p50/p99 from memtier's JSON. DRAM per flash item: quicksilver's
index bytes per item it holds; memcached's item bytes (`stats` bytes, its header items)
per flash item.

fio measures the device in the same run: 4 KiB random reads of a file in the flash files'
directory, O_DIRECT one at a time and 16 in flight (the device), and through a warm page cache
(what both servers get: they read their flash files through it, and on a machine with memory
to spare a recently written file stays there).

    scripts/bench-flash.py [--memtier PATH] [--dir DIR] [--dram-mb 64] [--seconds 15]
        [--rounds 1] [--connections 20] [--pipeline 1] [--direct] [--only NAMES]
        [--rates R1,R2,...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, cpu_seconds, free_port, rss_bytes, stats, wait_port  # noqa: E402






def fio(directory, mode, seconds):
    """4 KiB random reads of a 1 GiB file: `direct` (O_DIRECT, one at a time: the device's
    latency), `deep` (O_DIRECT, libaio, 16 in flight: the device's limit), `cached` (the page
    cache, the file read in first: what a server reading through it gets from a warm file)."""
    path = os.path.join(directory, "qs-fio.file")
    engine = {"direct": ["--ioengine=psync", "--direct=1", "--iodepth=1"],
              "deep": ["--ioengine=libaio", "--direct=1", "--iodepth=16"],
              "cached": ["--ioengine=psync", "--direct=0", "--iodepth=1", "--invalidate=0", "--pre_read=1"]}[mode]
    command = ["fio", "--name=randread", f"--filename={path}", "--size=1g", "--rw=randread", "--bs=4k",
               "--numjobs=1", f"--runtime={seconds}", "--time_based", "--output-format=json"] + engine
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    os.remove(path)
    job = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return job["iops"], job["clat_ns"]["percentile"]["50.000000"] / 1000, job["clat_ns"]["percentile"]["99.000000"] / 1000


def memtier(args, port, extra, json_file=None):
    command = ["taskset", "-c", "1", args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
               "-t", "1", "-c", str(args.connections), "--data-size-range=1024-4096",
               "--key-maximum", str(args.keys), "--hide-histogram"] + extra
    if json_file:
        command.append(f"--json-out-file={json_file}")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Server:
    """One server process on core 0, preloaded with every key once (memtier's P:P pattern)."""

    def __init__(self, args, command):
        self.port = free_port()
        self.flash_files = [part.split("=", 1)[1].split(":")[0] for part in command if part.startswith("ext_path=")]
        self.remove_flash_files()
        self.process = subprocess.Popen(["taskset", "-c", "0"] + command + ["-p", str(self.port), "-l", "127.0.0.1",
                                                                           "-U", "0"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        memtier(args, self.port, ["--ratio=1:0", "--key-pattern=P:P", "-n", "allkeys", "--pipeline=16"])

    def remove_flash_files(self):
        for path in self.flash_files:
            if os.path.exists(path):
                os.remove(path)

    def stop(self):
        self.process.terminate()
        self.process.wait()
        self.remove_flash_files()

    def run(self, args, name, dist, rate=None):
        """One measured run: closed loop, or open loop at `rate` requests/s in all (memtier's
        --rate-limiting is per connection)."""
        pattern = ["--key-pattern=Z:Z", "--key-zipf-exp=0.99"] if dist == "zipf" else ["--key-pattern=R:R"]
        if rate:
            pattern.append(f"--rate-limiting={max(1, rate // args.connections)}")
        before, cpu_before = stats(self.port), cpu_seconds(self.process.pid)
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            memtier(args, self.port, ["--ratio=1:9", f"--test-time={args.seconds}", f"--pipeline={args.pipeline}",
                                      "--distinct-client-seed"] + pattern, out.name)
            report = json.load(open(out.name))
        after, cpu_after = stats(self.port), cpu_seconds(self.process.pid)
        delta = lambda key: int(after.get(key, 0)) - int(before.get(key, 0))
        hits, misses = delta("get_hits"), delta("get_misses")
        operations = delta("cmd_get") + delta("cmd_set")
        totals = report["ALL STATS"]["Totals"]
        percentiles = totals.get("Percentile Latencies", {})
        items = int(after.get("curr_items", 0))
        flash_items = int(after.get("extstore_objects_used", 0))
        if "quicksilver" in after.get("version", ""):
            dram_per_flash_item = int(after["hash_bytes"]) / max(1, items + flash_items)
        elif flash_items:
            # memcached keeps a header item per flash item; its `bytes` counts them with the
            # items still in memory: charged here to the flash items, an upper bound.
            dram_per_flash_item = int(after["bytes"]) / max(1, items)
        else:
            dram_per_flash_item = 0
        ops_s = totals["Ops/sec"]
        hit_ratio = hits / max(1, hits + misses)
        return {
            "server": name, "dist": dist, "rate": rate, "ops_s": ops_s, "hit_ratio": hit_ratio,
            "hits_s": ops_s * 0.9 * hit_ratio,
            "cpu_us_op": (cpu_after - cpu_before) / max(1, operations) * 1e6,
            "p50_us": percentiles.get("p50.00", 0) * 1000, "p99_us": percentiles.get("p99.00", 0) * 1000,
            "flash_reads": delta("get_extstore"), "flash_items": flash_items, "dram_items": items,
            "dram_bytes_per_flash_item": dram_per_flash_item,
        }


def point(args, name, command, dist):
    server = Server(args, command)
    try:
        return server.run(args, name, dist)
    finally:
        server.stop()


def sweep(args, servers):
    """Open loop: each server at each offered rate, after one preload per server and key
    distribution. A rate is held when memtier achieved 90% of it (its rate limiter falls short by a few percent). The comparison: memcached
    extstore's highest held rate and its p99 there; then each other server's highest held rate
    whose p99 is no worse (its throughput at memcached's p99), in requests and in hits."""
    rates = [int(rate) for rate in args.rates.split(",")]
    print("| server | keys | offered/s | ops/s | hits/s | hit ratio | CPU us/op | p50 us | p99 us | flash reads |")
    print("|---" * 10 + "|")
    for dist in args.dists.split(","):
        results = {}
        for name, command in servers:
            server = Server(args, command)
            try:
                for rate in rates:
                    r = server.run(args, name, dist, rate)
                    results.setdefault(name, []).append(r)
                    print(f"| {name} | {dist} | {rate} | {r['ops_s']:.0f} | {r['hits_s']:.0f} | {r['hit_ratio']:.4f} | "
                          f"{r['cpu_us_op']:.1f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['flash_reads']} |",
                          flush=True)
                    if r["ops_s"] < 0.8 * rate:
                        break
            finally:
                server.stop()
        held = {name: [r for r in rs if r["ops_s"] >= 0.9 * r["rate"]] for name, rs in results.items()}
        reference = held.get("memcached extstore")
        if not reference:
            continue
        best = max(reference, key=lambda r: r["rate"])
        print(f"{dist}: memcached extstore holds {best['ops_s']:.0f}/s ({best['hits_s']:.0f} hits/s) "
              f"at p99 {best['p99_us']:.0f} us")
        for name, rs in held.items():
            if name == "memcached extstore":
                continue
            within = [r for r in rs if r["p99_us"] <= best["p99_us"]]
            if within:
                top = max(within, key=lambda r: r["rate"])
                print(f"{dist}: {name} at that p99: {top['ops_s']:.0f}/s ({top['ops_s'] / best['ops_s']:.2f}x), "
                      f"{top['hits_s']:.0f} hits/s ({top['hits_s'] / max(1, best['hits_s']):.2f}x)")
            else:
                print(f"{dist}: {name} holds no rate within that p99")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--quicksilver", default=os.path.join(ROOT, "target/release/quicksilver"))
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the flash files go")
    parser.add_argument("--dram-mb", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--dists", default="zipf,uniform")
    parser.add_argument("--direct", action="store_true",
                        help="also quicksilver with -o flash_direct (O_DIRECT: its flash reads reach the device)")
    parser.add_argument("--only", default="", help="comma-separated server names to run (default: all)")
    parser.add_argument("--rates", default="",
                        help="comma-separated offered rates (requests/s in all): an open-loop sweep instead")
    args = parser.parse_args()
    dram = args.dram_mb
    flash = 10 * dram
    # A working set of ten times DRAM: items average ~2.6 KB with their keys and headers.
    args.keys = flash * (1 << 20) // 2600
    for mode in ("direct", "deep", "cached"):
        iops, p50, p99 = fio(args.dir, mode, 5)
        print(f"fio 4 KiB random reads, {args.dir}, {mode}: {iops:.0f}/s (p50 {p50:.1f} us, p99 {p99:.1f} us)")
    run_as = ["-u", "nobody"] if os.geteuid() == 0 else []
    servers = [
        ("quicksilver flash", [args.quicksilver, "-t", "1", "-m", str(dram), "-o",
                               f"ext_path={args.dir}/qs-bench-flash:{flash}m"]),
        ("memcached extstore", ["memcached"] + run_as + ["-t", "1", "-m", str(dram), "-o",
                                f"ext_path={args.dir}/mc-bench-flash:{flash}m"]),
        ("quicksilver 10x DRAM", [args.quicksilver, "-t", "1", "-m", str(flash + dram)]),
        ("memcached 10x DRAM", ["memcached"] + run_as + ["-t", "1", "-m", str(flash + dram)]),
    ]
    if args.direct:
        servers.insert(1, ("quicksilver flash O_DIRECT", [args.quicksilver, "-t", "1", "-m", str(dram), "-o",
                                                         f"ext_path={args.dir}/qs-bench-flash:{flash}m,flash_direct"]))
    if args.only:
        servers = [server for server in servers if server[0] in args.only.split(",")]
    print(f"DRAM {dram} MiB, flash {flash} MiB, {args.keys} keys of 1-4 KiB, set:get 1:9, "
          f"{args.connections} connections, pipeline {args.pipeline}, {args.seconds} s")
    if args.rates:
        sweep(args, servers)
        return
    header = "| server | keys | ops/s | hit ratio | CPU us/op | p50 us | p99 us | flash reads | flash items | DRAM B/flash item |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for _ in range(args.rounds):
        for dist in args.dists.split(","):
            for name, command in servers:
                r = point(args, name, command, dist)
                per_item = f"{r['dram_bytes_per_flash_item']:.1f}" if r["flash_items"] else "-"
                print(f"| {r['server']} | {dist} | {r['ops_s']:.0f} | {r['hit_ratio']:.4f} | {r['cpu_us_op']:.1f} | "
                      f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['flash_reads']} | {r['flash_items']} | {per_item} |",
                      flush=True)


if __name__ == "__main__":
    main()
