#!/usr/bin/env python3
"""A replicated pair of quicksilver behind memcached 1.6.45's proxy (`route_allsync` sets,
`route_failover` reads) losing a backend under load: memtier_benchmark through the proxy (4
connections, 500 gets a second each over the same keys: gets only, as memtier stops at the first
`SERVER_ERROR`, which `route_allsync` answers a set while b is down) and, counted here,
one client a request at a time (90% gets, 10% sets over KEYS keys); PHASE_SECS (10) with both
backends, as long after `kill -9` of b, as long after b is restarted from its memory file (-e):
the counted client's gets, misses, errors and set errors per phase, memtier's totals, and what b
holds after its warm restart.

    scripts/bench-proxy-fault.py [--check]    (scripts/build-memcached-proxy.sh and
                                                scripts/build-memtier.sh first)

With --check (scripts/test.sh) it fails unless no read missed or failed in any phase, sets
failed only while b was down or until the proxy retried it (none in the last phase's last
second), memtier's load ran through all three, and b took back every key.
"""
import collections
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(HERE)
QS = os.environ.get("QS_BIN", os.path.join(ROOT, "target", "release", "quicksilver"))
PROXY = os.environ.get("QS_MEMCACHED_PROXY",
                       os.path.expanduser("~/.cache/quicksilver/proxy/memcached-1.6.45/memcached"))
MEMTIER = os.environ.get("MEMTIER", os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
KEYS = 5000
PHASE_SECS = int(os.environ.get("PHASE_SECS", 10))


def main():
    a, b, proxy_port = free_port(), free_port(), free_port()
    memory = tempfile.mktemp(prefix="qs-fault-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    config = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    config.write(f'pools{{ a = {{ backends = {{ "127.0.0.1:{a}" }} }}, b = {{ backends = {{ "127.0.0.1:{b}" }} }} }}\n'
                 'routes{ cmap = { set = route_allsync{ children = { "a", "b" } } },\n'
                 '        default = route_failover{ children = { "a", "b" } } }\n')
    config.close()
    os.chmod(config.name, 0o644)
    b_argv = [QS, "-p", str(b), "-l", "127.0.0.1", "-U", "0", "-t", "1", "-m", "64", "-e", memory]
    processes = [subprocess.Popen([QS, "-p", str(a), "-l", "127.0.0.1", "-U", "0", "-t", "1"])]
    backend_b = subprocess.Popen(b_argv)
    # The backends first: a proxy that finds one not listening marks it failed for a while.
    for port in (a, b):
        wait_port(port)
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    processes.append(subprocess.Popen([PROXY, *user, "-p", str(proxy_port), "-l", "127.0.0.1", "-U", "0", "-t", "1",
                                       "-o", f"proxy_config=routelib,proxy_arg={config.name}"]))
    wait_port(proxy_port)
    time.sleep(0.3)
    try:
        counts = load(proxy_port, backend_b, b_argv, b)
        backend_b = counts.pop("process")
        background = counts.pop("memtier")
        try:
            out, _ = background.communicate(timeout=3 * PHASE_SECS + 30) if background else ("not built", None)
        except subprocess.TimeoutExpired:
            background.kill()
            out = "memtier did not finish"
        totals = next((line for line in out.splitlines() if line.startswith("Totals")), out.strip())
        print(f"memtier through the proxy meanwhile: {' '.join(totals.split())}")
        for phase in ("before", "b down", "after b's warm restart"):
            print(f"{phase}: {dict(counts[phase])}")
        with socket.create_connection(("127.0.0.1", b)) as s:
            s.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                data += s.recv(65536)
        items = next(line for line in data.decode().splitlines() if line.startswith("STAT curr_items "))
        print(f"b after its warm restart: {items.split()[2]} of {KEYS} items")
        if "--check" in sys.argv:
            check(counts, totals, int(items.split()[2]))
    finally:
        for process in processes + [backend_b]:
            process.kill()
            process.wait()
        os.unlink(config.name)
        for suffix in ("", ".meta", ".index"):
            if os.path.exists(memory + suffix):
                os.unlink(memory + suffix)


def check(counts, totals, b_items):
    """Exits non-zero unless the fault cost what the docs promise and no more."""
    failures = []
    for phase in ("before", "b down", "after b's warm restart"):
        got = counts[phase]
        if got["gets"] == 0 or got["misses"] or got["get errors"]:
            failures.append(f"{phase}: reads {dict(got)}")
        if phase == "before" and got["set errors"]:
            failures.append(f"{phase}: set errors with both backends up {dict(got)}")
        # After the restart sets fail until the proxy retries b: never in the phase's last second.
        if phase == "after b's warm restart" and got["last set error ms"] > (PHASE_SECS - 1) * 1000:
            failures.append(f"{phase}: the proxy had not taken b back a second before the end {dict(got)}")
    # Totals: ops/s, hits/s, misses/s, ... (memtier is a benchmark tool, built where it can be
    # fetched: without it the counted client is the load).
    if totals == "not built":
        print("memtier not built (scripts/build-memtier.sh): the counted client alone is the load")
    elif not totals.startswith("Totals") or float(totals.split()[3]) != 0.0:
        failures.append(f"memtier: {totals}")
    # b holds every key (memtier's sets while it was down made none new: same key range).
    if b_items < KEYS:
        failures.append(f"b took back {b_items} of {KEYS} keys")
    for failure in failures:
        print("FAIL " + failure)
    if failures:
        sys.exit(1)
    print("ok   a backend lost under load: no read missed or failed, b came back with every key")


def load(proxy_port, backend_b, b_argv, b):
    """Runs the three phases; the counts per phase, and b's process as it ends."""
    s = socket.create_connection(("127.0.0.1", proxy_port))
    s.settimeout(5)
    replies = s.makefile("rb")
    for i in range(KEYS):
        s.sendall(b"set k%d 0 0 5\r\nvalue\r\n" % i)
        replies.readline()
    # memtier's gets start once every key is stored: a miss is then a lost read.
    counts = collections.defaultdict(collections.Counter)
    counts["memtier"] = None if not os.access(MEMTIER, os.X_OK) else subprocess.Popen(
        [MEMTIER, "-s", "127.0.0.1", "-p", str(proxy_port), "-P", "memcache_text", "-t", "1", "-c", "4",
         "--rate-limiting", "500", "--ratio", "0:1", "--key-prefix", "k", "--key-minimum", "1",
         "--key-maximum", str(KEYS - 1), "-d", "5", "--test-time", str(3 * PHASE_SECS + 1),
         "--hide-histogram"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    start = time.time()
    killed = restarted = False
    while (elapsed := time.time() - start) < 3 * PHASE_SECS:
        if elapsed >= PHASE_SECS and not killed:
            backend_b.kill()
            backend_b.wait()
            killed = True
        if elapsed >= 2 * PHASE_SECS and not restarted:
            backend_b = subprocess.Popen(b_argv)
            wait_port(b)
            restarted = True
        phase = "before" if not killed else ("b down" if not restarted else "after b's warm restart")
        into_phase = elapsed - PHASE_SECS * (0 if not killed else (1 if not restarted else 2))
        key = random.randrange(KEYS)
        if random.random() < 0.1:
            s.sendall(b"set k%d 0 0 5\r\nvalue\r\n" % key)
            counts[phase]["sets"] += 1
            if not replies.readline().startswith(b"STORED"):
                counts[phase]["set errors"] += 1
                counts[phase]["last set error ms"] = int(into_phase * 1000)
            continue
        s.sendall(b"get k%d\r\n" % key)
        counts[phase]["gets"] += 1
        line = replies.readline()
        if line.startswith(b"VALUE"):
            replies.readline()
            replies.readline()
        elif line.startswith(b"END"):
            counts[phase]["misses"] += 1
        else:
            counts[phase]["get errors"] += 1
    counts["process"] = backend_b
    return counts


if __name__ == "__main__":
    main()
