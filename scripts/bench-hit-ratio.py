#!/usr/bin/env python3
"""Hit ratio at a fixed item memory, side by side, measured by memtier_benchmark (issue 44).

Each server gets 64 MiB of item memory and one worker. memtier fills 1,000,000 keys with values
of 100-1000 bytes, then runs zipf 0.99 over them, one set in eleven, for --rounds rounds; the
hit ratio of each round is memtier's hits over its gets.

    scripts/bench-hit-ratio.py [--rounds 2] [--requests 100000] [--servers memcached,clock,approx-lru]
        [--zipf 0.99] [--scan]

--zipf sets the exponent; --scan runs beside each round a second memtier that sets keys never
seen before, one each (values 100-1000 bytes), three requests in ten: a scan polluting the cache.
--ttl-mix gives the keys times to live of 1 hour to 1 day and runs beside them a load as large
as a third of the whole over 500,000 keys living 1-300 s (memcached and quicksilver only: the
hit ratio is read from the server's `stats`).

With --small-fill KEYS it instead writes KEYS keys (their numbers: up to 8 digits) with 32-byte
values once, in order, and reports the items each server then holds (curr_items; for Segcache
its admin port's item count) and what share of the item memory they fill at 56 bytes each
(quicksilver's item size for them: 16 of header, 40 of data). --memory-mib sets the item memory
of every server (64 unless given); for the hit-ratio loads the keys grow with it (16 million at
1024).

Servers: memcached (`-m 64 -t 1`), quicksilver with each eviction policy named (`fifo`, `lru`,
`approx-lru`, `clock`; `-m 64 -t 1 --eviction POLICY`), and `segcache` (its default Merge
eviction) or `segcache-s3fifo` when Pelikan's binary is at
~/.cache/servers/pelikan-target/release/pelikan-segcache (built outside the repository:
`cargo build --release -p pelikan-segcache` in a checkout of github.com/pelikan-io/pelikan with
CARGO_TARGET_DIR=~/.cache/servers/pelikan-target), with its shipped config's settings, our
ports and a 64 MB heap.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QS = os.path.join(REPO, "target/release/quicksilver")
SEGCACHE = os.path.expanduser("~/.cache/servers/pelikan-target/release/pelikan-segcache")
KEYS = 1_000_000
# Keys per 64 MiB of item memory: --memory-mib 1024 makes it 16 million (set in main).
SCALE = [1]


ADMIN_PORTS = {}


def command_for(name, port, workdir, memory_mib=64):
    user = ["-u", "nobody"] if os.getuid() == 0 else []
    memory = str(memory_mib)
    if name == "memcached":
        return ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", memory, "-t", "1"] + user
    if name.startswith("segcache"):
        # Pelikan's shipped config/segcache.toml with our ports and a 64 MB heap; its eviction
        # (Merge) unless the name says S3Fifo.
        eviction = "S3Fifo" if name == "segcache-s3fifo" else "Merge"
        config = os.path.join(workdir, "segcache.toml")
        ADMIN_PORTS[port] = free_port()
        # Its shipped hash_power (22) at 64 MB; as many more buckets as the heap is larger.
        hash_power = 22 + max(0, (memory_mib // 64).bit_length() - 1)
        with open(config, "w") as f:
            f.write(f"""daemonize = false
[admin]
host = "127.0.0.1"
port = "{ADMIN_PORTS[port]}"
http_enabled = false
[server]
host = "127.0.0.1"
port = "{port}"
timeout = 100
nevent = 1024
[worker]
timeout = 100
nevent = 1024
threads = 1
[seg]
hash_power = {hash_power}
heap_size = "{memory_mib}MB"
segment_size = "1MB"
compact_target = 2
merge_target = 4
merge_max = 8
eviction = "{eviction}"
[time]
time_type = "Memcache"
[buf]
[debug]
log_level = "error"
""")
        return [SEGCACHE, config]
    return [QS, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", memory, "-t", "1", "--eviction", name]


def stats_of(port):
    """`stats` over the text protocol, as a dict."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return {parts[1]: parts[2] for parts in (line.split(" ") for line in data.decode().split("\r\n"))
            if len(parts) == 3}


def start(name, args, workdir):
    """A server of `name` on a free port, answering; returns (process, port)."""
    port = free_port()
    server = subprocess.Popen(command_for(name, port, workdir, args.memory_mib), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
    except BaseException:
        server.kill()
        server.wait()
        raise
    time.sleep(0.3)
    return server, port


def small_fill(name, args, workdir):
    """Items held after one in-order write of args.small_fill small keys."""
    server, port = start(name, args, workdir)
    try:
        per_connection = args.small_fill // 10
        # Segcache has been seen to stop answering part way through this fill (its sets stop
        # counting): what it holds then is reported, marked.
        stalled = False
        try:
            subprocess.run([args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
                        "--hide-histogram", "--data-size=32", "--key-prefix=", "--key-minimum=1",
                        f"--key-maximum={args.small_fill}", "--key-pattern=P:P", "--ratio=1:0",
                            "-t", "1", "-c", "10", f"--requests={per_connection}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                           timeout=args.small_fill / 50_000 + 60)
        except subprocess.TimeoutExpired:
            stalled = True
        if port in ADMIN_PORTS:
            figures = stats_of(ADMIN_PORTS[port])
            figures["stalled"] = stalled
            return int(figures.get("items", figures.get("item_current", 0))), figures
        figures = stats_of(port)
        figures["stalled"] = stalled
        return int(figures["curr_items"]), figures
    finally:
        server.kill()
        server.wait()


def memtier(memtier_bin, port, extra, workdir):
    out = os.path.join(workdir, "memtier.json")
    subprocess.run([memtier_bin, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "--hide-histogram",
                    "--data-size-range=100-1000", f"--key-maximum={KEYS * SCALE[0]}", "--key-minimum=1",
                    f"--json-out-file={out}"] + extra,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    with open(out) as f:
        gets = json.load(f)["ALL STATS"]["Gets"]
    hits, misses = gets["Hits/sec"], gets["Misses/sec"]
    return hits / (hits + misses) if hits + misses else 0.0


def measure(name, args, workdir):
    server, port = start(name, args, workdir)
    try:
        long_ttl = ["--expiry-range=3600-86400"] if args.ttl_mix else []
        memtier(args.memtier, port, ["-t", "1", "-c", "10", "--ratio=1:0", "--key-pattern=P:P",
                                     f"--requests={KEYS * SCALE[0] // 10}"] + long_ttl, workdir)
        if args.ttl_mix:
            return ttl_mix_rounds(args, port, workdir)
        ratios = []
        for _ in range(args.rounds):
            scan = None
            if args.scan:
                # The scan: sets of keys never seen before, one each, beside the zipf load:
                # three requests in ten (its 10 connections send 3/7 as many as the 20 above).
                scan = subprocess.Popen(
                    [args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "--hide-histogram",
                     "--data-size-range=100-1000", "--key-prefix=scan:", "--key-pattern=P:P", "--ratio=1:0",
                     "--key-minimum=1", "--key-maximum=1000000000", "-t", "1", "-c", "10",
                     f"--requests={args.requests * 2 * 3 // 7}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ratios.append(memtier(args.memtier, port, ["-t", "2", "-c", "10", "--ratio=1:10", "--key-pattern=Z:Z",
                                                       f"--key-zipf-exp={args.zipf}", f"--requests={args.requests}"],
                                  workdir))
            if scan:
                scan.wait()
        if port not in ADMIN_PORTS and not name.startswith("segcache"):
            figures = stats_of(port)
            print(f"{'':12} after: curr_items {figures.get('curr_items')}, evictions {figures.get('evictions')}, "
                  f"keeps (moves_within_lru) {figures.get('moves_within_lru', '-')}", flush=True)
        return ratios
    finally:
        server.kill()
        server.wait()


def ttl_mix_rounds(args, port, workdir):
    """The TTL mix: beside the zipf load (its keys living 1 hour to 1 day), a third memtier as
    large over 500,000 other keys living 1 to 300 s, so a third of the keys and of the requests
    are short-lived; the hit ratio of each round is the server's own (get_hits over gets, from
    `stats` before and after: expired items count as misses)."""
    short = ["--key-prefix=short:", "--key-maximum=500000", "--expiry-range=1-300"]
    memtier(args.memtier, port, ["-t", "1", "-c", "10", "--ratio=1:0", "--key-pattern=P:P",
                                 "--requests=50000"] + short, workdir)
    ratios = []
    for _ in range(args.rounds):
        before = stats_of(port)
        short_load = subprocess.Popen(
            [args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "--hide-histogram",
             "--data-size-range=100-1000", "--key-minimum=1", "--key-pattern=Z:Z", f"--key-zipf-exp={args.zipf}",
             "--ratio=1:10", "-t", "1", "-c", "10", f"--requests={args.requests}"] + short,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        memtier(args.memtier, port, ["-t", "2", "-c", "10", "--ratio=1:10", "--key-pattern=Z:Z",
                                     f"--key-zipf-exp={args.zipf}", f"--requests={args.requests}",
                                     "--expiry-range=3600-86400"], workdir)
        short_load.wait()
        after = stats_of(port)
        hits = int(after["get_hits"]) - int(before["get_hits"])
        misses = int(after["get_misses"]) - int(before["get_misses"])
        ratios.append(hits / max(1, hits + misses))
    figures = stats_of(port)
    print(f"{'':12} after: curr_items {figures.get('curr_items')}, reclaimed {figures.get('reclaimed')}, "
          f"keeps (moves_within_lru) {figures.get('moves_within_lru', '-')}", flush=True)
    return ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=100_000, help="per memtier connection per round")
    parser.add_argument("--servers", default="memcached,approx-lru,clock")
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--zipf", type=float, default=0.99, help="memtier's --key-zipf-exp")
    parser.add_argument("--scan", action="store_true",
                        help="a concurrent scan of new keys set once, three requests in ten")
    parser.add_argument("--ttl-mix", action="store_true",
                        help="a third of the keys and requests with times to live of 1-300 s, the rest 1 h-1 day")
    parser.add_argument("--small-fill", type=int, default=0, metavar="KEYS")
    parser.add_argument("--memory-mib", type=int, default=64)
    args = parser.parse_args()
    SCALE[0] = max(1, args.memory_mib // 64)
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.servers.split(","):
            if name.startswith("segcache") and not os.path.exists(SEGCACHE):
                print(f"{name:12} (not built: {SEGCACHE})")
                continue
            if args.small_fill:
                items, figures = small_fill(name, args, workdir)
                share = items * 56 / (args.memory_mib << 20)
                extra = f"  hash_bytes {figures['hash_bytes']}" if "hash_bytes" in figures else ""
                if figures["stalled"]:
                    extra += f"  (stalled after {figures.get('set', '?')} sets)"
                print(f"{name:12} items {items:,}  ({share:.1%} of -m at 56 B each){extra}", flush=True)
                continue
            ratios = measure(name, args, workdir)
            print(f"{name:12} hit ratio: " + "  ".join(f"{ratio:.3f}" for ratio in ratios), flush=True)


if __name__ == "__main__":
    main()
