#!/usr/bin/env python3
"""Replacing a node of a fleet behind memcached 1.6.45's proxy, with and without --warm-from.

Three quicksilver nodes (-t 1 -m MEMORY each) behind the proxy (routelib, one pool, route_direct)
hold KEYS keys of 1,000-byte values (about 1 GiB a node by default), filled through the proxy.
memtier_benchmark then runs through the proxy for BEFORE + AFTER seconds: 1 set to 9 gets,
zipf keys (exponent 1), 8 connections at RATE requests a second each, so the sets stand in for
the refills a cache's clients make after a miss. Every second the fleet's hit ratio is read from
the three current nodes' `stats` (get_hits over get_hits + get_misses, the second's deltas).

At BEFORE seconds the third node is replaced by a new process on another port, and the proxy's
routes are switched to it (its config rewritten, then SIGHUP):
  cold        the new node starts empty; the old one stops.
  warm        the new node starts with --warm-from the old one and takes traffic at once;
              the old one stops when the warm has ended.
  warm-first  the new node warms from the old one while the old one keeps serving; the proxy
              switches once `stats warm` says done (as /readyz would). The old node has core 1
              to itself, everything else shares core 0, but for a second memtier on core 1 (2
              connections, 500 small sets a second each, keys of their own) that sends to the
              old node directly for 10 s before the warm and 10 s from its start: its p99 is
              the source's cost.

    scripts/bench-warm.py [--modes cold,warm,warm-first] [--out warm.json]
    KEYS=300000 MEMORY=128 scripts/bench-warm.py     a tenth of the size, for a quick look
    WARM_RATE=8 scripts/bench-warm.py --modes warm-first     the new node's -o warm_rate

Writes per mode the seconds, the fleet's hit ratio and the warm's copied items, the baseline
(the mean ratio over the seconds before the replacement, from the fifth), and the seconds until
the ratio is back within 2 points of it (and stays there five seconds). `qs-bench
hit-ratio-plot --input warm.json --out warm.svg` draws them.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import free_port, stats, wait_port  # noqa: E402

ROOT = os.path.dirname(HERE)
QS = os.environ.get("QS_BIN", os.path.join(ROOT, "target", "release", "quicksilver"))
MEMTIER = os.environ.get("MEMTIER", os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
PROXY = os.environ.get("QS_MEMCACHED_PROXY",
                       os.path.expanduser("~/.cache/quicksilver/proxy/memcached-1.6.45/memcached"))
KEYS = int(os.environ.get("KEYS", 3_000_000))
MEMORY = int(os.environ.get("MEMORY", 1100))
BEFORE = int(os.environ.get("BEFORE", 20))
AFTER = int(os.environ.get("AFTER", 80))
RATE = int(os.environ.get("RATE", 1000))
# -o warm_rate of the new node (MB of values a second; unset: quicksilver's default, 32).
WARM_RATE = os.environ.get("WARM_RATE")
VALUE = 1000


def node(port, *extra):
    return subprocess.Popen([QS, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "1", "-m", str(MEMORY),
                             *extra], stderr=subprocess.DEVNULL if not os.environ.get("VERBOSE") else None)


def write_routes(path, ports):
    with open(path, "w") as f:
        backends = ", ".join(f'"127.0.0.1:{port}"' for port in ports)
        f.write(f"pools{{ main = {{ backends = {{ {backends} }} }} }}\n"
                "routes{ default = route_direct{ child = \"main\" } }\n")
    os.chmod(path, 0o644)


def memtier(port, *args):
    return [MEMTIER, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text", "-t", "1", "-d", str(VALUE),
            "--key-maximum", str(KEYS), "--hide-histogram", *args]


def p99(output):
    """The Sets line's p99 (ms) of a memtier summary."""
    for line in output.splitlines():
        if line.startswith("Sets"):
            try:
                return float(line.split()[6])
            except ValueError:
                return None
    return None


class Fleet:
    """The three nodes, the proxy and its routes."""

    def __init__(self):
        self.ports = [free_port() for _ in range(3)]
        self.processes = [node(port) for port in self.ports]
        for port in self.ports:
            wait_port(port)
        self.routes = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False).name
        write_routes(self.routes, self.ports)
        self.proxy_port = free_port()
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        self.proxy = subprocess.Popen([PROXY, *user, "-p", str(self.proxy_port), "-l", "127.0.0.1", "-U", "0",
                                       "-t", "1", "-o", f"proxy_config=routelib,proxy_arg={self.routes}"])
        wait_port(self.proxy_port)
        time.sleep(0.5)

    def fill(self):
        started = time.time()
        out = subprocess.run(memtier(self.proxy_port, "-c", "10", "--ratio", "1:0", "--key-pattern", "P:P",
                                     "--pipeline", "16", "-n", str(KEYS // 10)),
                             capture_output=True, text=True).stdout
        items = sum(int(stats(port)["curr_items"]) for port in self.ports)
        print(f"filled {items} items of {KEYS} in {time.time() - started:.0f} s", file=sys.stderr)
        return out

    def switch(self, slot, port):
        self.ports[slot] = port
        write_routes(self.routes, self.ports)
        self.proxy.send_signal(signal.SIGHUP)

    def close(self):
        for process in self.processes + [self.proxy]:
            process.kill()
            process.wait()
        os.unlink(self.routes)


def run(mode):
    fleet = Fleet()
    try:
        fleet.fill()
        return measure(fleet, mode)
    finally:
        fleet.close()


def measure(fleet, mode):
    """The load, the replacement at BEFORE seconds, a sample a second. In warm-first the old node
    has core 1 to itself and everything else shares core 0, so its p99 shows what serving the
    copy costs it, not the new node's and the warm's work on the same two cores."""
    if mode == "warm-first":
        for process in fleet.processes + [fleet.proxy]:
            pin(process.pid, 1 if process is fleet.processes[2] else 0)
    taskset = ["taskset", "-c", "0"] if mode == "warm-first" else []
    load = subprocess.Popen(taskset + memtier(fleet.proxy_port, "-c", "8", "--ratio", "1:9", "--key-pattern", "Z:Z",
                                    "--rate-limiting", str(RATE), "--test-time", str(BEFORE + AFTER)),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples, probes, events = [], {}, {}
    last = [totals(port) for port in fleet.ports]
    old_port, new_port, new = fleet.ports[2], None, None
    started = time.time()
    for second in range(1, BEFORE + AFTER + 1):
        time.sleep(max(0.0, started + second - time.time()))
        if second == BEFORE - 12 and mode == "warm-first":
            probe_p99(old_port, probes, "before")
        if second == BEFORE:
            new_port = free_port()
            warm = ["--warm-from", f"127.0.0.1:{old_port}"] if mode != "cold" else []
            if WARM_RATE and mode != "cold":
                warm += ["-o", f"warm_rate={WARM_RATE}"]
            new = node(new_port, *warm)
            fleet.processes.append(new)
            if mode == "warm-first":
                pin(new.pid, 0)
            wait_port(new_port)
            events["replaced"] = time.time() - started
            if mode == "warm-first":
                probe_p99(old_port, probes, "warming")
            else:
                fleet.switch(2, new_port)
                last[2] = (0, 0)
                if mode == "cold":
                    retire(fleet.processes[2])
        warm = stats(new_port, "warm") if new_port and mode != "cold" else {}
        if warm.get("warm_state") in ("done", "failed") and "warmed" not in events:
            events["warmed"] = time.time() - started
            if mode == "warm-first":
                # The old node stays up (out of the routes) while the probe reads it.
                fleet.switch(2, new_port)
                last[2] = (0, 0)
            else:
                retire(fleet.processes[2])
        now = [totals(port) for port in fleet.ports]
        hits = sum(n[0] - l[0] for n, l in zip(now, last))
        gets = sum(n[1] - l[1] for n, l in zip(now, last))
        last = now
        samples.append({"t": second, "ratio": hits / gets if gets else None,
                        "copied": int(warm.get("warm_copied_items", 0))})
    out, _ = load.communicate()
    return summarize(mode, samples, events, probes, out)


def pin(pid, cpu):
    """Moves every thread of process `pid` to core `cpu`."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), {cpu})
        except OSError:
            pass


def retire(process):
    """Stops the old node two seconds after the proxy was switched away from it, as an operator
    drains before stopping: the proxy answers what it still had in flight to a backend that
    stops with SERVER_ERROR, and memtier stops at the first one it reads ("response parsing
    failed")."""
    threading.Timer(2.0, process.kill).start()


def totals(port):
    """(get_hits, get_hits + get_misses) of the node on `port`."""
    s = stats(port)
    return int(s["get_hits"]), int(s["get_hits"]) + int(s["get_misses"])


def probe_p99(port, probes, phase):
    """Starts 10 s of direct requests to the old node in the background, on the old node's core
    (so the rest's work on core 0 does not delay the probe itself); their p99 lands in `probes`.
    Sets of small values under keys of their own, so that the fleet's get figures stay the
    load's."""
    def probe():
        out = subprocess.run(["taskset", "-c", "1", *memtier(port, "-c", "2", "--ratio", "1:0", "-d", "32",
                                                             "--key-prefix", "probe-", "--rate-limiting", "500",
                                                             "--test-time", "10")],
                             capture_output=True, text=True).stdout
        probes[phase] = p99(out)
    threading.Thread(target=probe, daemon=True).start()


def summarize(mode, samples, events, probes, out):
    before = [s["ratio"] for s in samples if 5 <= s["t"] < BEFORE and s["ratio"] is not None]
    baseline = sum(before) / len(before)
    recovered = None
    for i, sample in enumerate(samples):
        window = [s["ratio"] for s in samples[i:i + 5]]
        if sample["t"] >= BEFORE and len(window) == 5 and all(r is not None and r >= baseline - 0.02 for r in window):
            recovered = sample["t"] - BEFORE
            break
    low = min((s["ratio"] for s in samples if s["t"] >= BEFORE and s["ratio"] is not None), default=None)
    totals_line = next((line for line in out.splitlines() if line.startswith("Totals")), "")
    if WARM_RATE and mode != "cold":
        mode = f"{mode} ({WARM_RATE} MB/s)"
    result = {"mode": mode, "keys": KEYS, "memory_mb": MEMORY, "rate": RATE * 8, "replaced_at": BEFORE,
              "baseline": baseline, "lowest": low, "recovered_after_s": recovered, "events": events,
              "source_p99_ms": probes, "memtier_totals": re.sub(r"\s+", " ", totals_line), "samples": samples}
    print(f"{mode}: baseline {baseline:.4f}, lowest {low:.4f}, back within 2 points after "
          f"{recovered} s; events {events}; source p99 {probes}", file=sys.stderr)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="cold,warm,warm-first")
    parser.add_argument("--out", default="warm.json")
    options = parser.parse_args()
    runs = [run(mode) for mode in options.modes.split(",")]
    with open(options.out, "w") as f:
        json.dump({"runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
