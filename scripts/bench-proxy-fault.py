#!/usr/bin/env python3
"""A replicated pair of quicksilver behind memcached 1.6.45's proxy (`route_allsync` sets,
`route_failover` reads) losing a backend under load: one client, one request at a time (90%
gets, 10% sets over KEYS keys), 10 s with both, 10 s after `kill -9` of b, 10 s after b is
restarted from its memory file (-e); gets, misses, errors and set errors per phase, and what b
holds after its warm restart.

    scripts/bench-proxy-fault.py     (scripts/build-memcached-proxy.sh first)
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
KEYS = 5000
PHASE_SECS = 10


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
        for phase in ("before", "b down", "after b's warm restart"):
            print(f"{phase}: {dict(counts[phase])}")
        with socket.create_connection(("127.0.0.1", b)) as s:
            s.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                data += s.recv(65536)
        items = next(line for line in data.decode().splitlines() if line.startswith("STAT curr_items "))
        print(f"b after its warm restart: {items.split()[2]} of {KEYS} items")
    finally:
        for process in processes + [backend_b]:
            process.kill()
            process.wait()
        os.unlink(config.name)
        for suffix in ("", ".meta", ".index"):
            if os.path.exists(memory + suffix):
                os.unlink(memory + suffix)


def load(proxy_port, backend_b, b_argv, b):
    """Runs the three phases; the counts per phase, and b's process as it ends."""
    s = socket.create_connection(("127.0.0.1", proxy_port))
    s.settimeout(5)
    replies = s.makefile("rb")
    for i in range(KEYS):
        s.sendall(b"set k%d 0 0 5\r\nvalue\r\n" % i)
        replies.readline()
    counts = collections.defaultdict(collections.Counter)
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
        key = random.randrange(KEYS)
        if random.random() < 0.1:
            s.sendall(b"set k%d 0 0 5\r\nvalue\r\n" % key)
            counts[phase]["sets"] += 1
            if not replies.readline().startswith(b"STORED"):
                counts[phase]["set errors"] += 1
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
