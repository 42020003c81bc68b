#!/usr/bin/env python3
"""TLS side by side (issue 28): server CPU per operation with TLS (-Z) against plaintext, for
quicksilver and memcached 1.6 in the same run, at pipeline depths 1 and 16, under
memtier_benchmark (its --tls client with the test CA and client certificate of
crates/server/tests/tls); then handshakes per second per core (memtier reconnecting after every
request, so each request pays a full handshake).

Each server runs on core 0 with one worker thread, memtier on core 1. Per point: start the
server, preload the keys, run memtier for --seconds, read the server's CPU time from
/proc/PID/stat and its operation count from `stats` (over a plaintext `notls` listener), stop
the server. CPU per operation is the server's, not the client's: it is what a server core can
do.

    scripts/bench-tls.py [--memtier PATH] [--seconds 10] [--rounds 1] [--connections 20]
        [--data-size 100] [--keys 10000] [--only NAMES]
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
from benchlib import ROOT, cpu_seconds, free_port, rss_bytes, stats, wait_port  # noqa: E402
CERTS = os.path.join(ROOT, "crates/server/tests/tls")






def memtier(args, port, tls, extra, json_file=None):
    command = ["taskset", "-c", "1", args.memtier, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
               "-t", "1", "-c", str(args.connections), f"--data-size={args.data_size}",
               "--key-maximum", str(args.keys), "--hide-histogram"] + extra
    if tls:
        command += ["--tls", f"--cacert={CERTS}/ca.pem", f"--cert={CERTS}/client.pem", f"--key={CERTS}/client.key",
                    "--sni=localhost"]
    if json_file:
        command.append(f"--json-out-file={json_file}")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def point(args, name, command, tls, pipeline, handshakes=False):
    port, plain = free_port(), free_port()
    listen = ["-l", f"127.0.0.1:{port}"]
    if tls:
        listen = ["-l", f"127.0.0.1:{port},notls:127.0.0.1:{plain}", "-Z", "-o",
                  f"ssl_chain_cert={CERTS}/server.pem,ssl_key={CERTS}/server.key"]
    else:
        plain = port
    server = subprocess.Popen(["taskset", "-c", "0"] + command + ["-p", str(port), "-U", "0"] + listen,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(plain)
        memtier(args, port, tls, ["--ratio=1:0", "--key-pattern=P:P", "-n", "allkeys", "--pipeline=16"])
        before, cpu_before = stats(plain), cpu_seconds(server.pid)
        extra = ["--ratio=1:9", f"--test-time={args.seconds}", f"--pipeline={pipeline}", "--key-pattern=R:R",
                 "--distinct-client-seed"]
        if handshakes:
            extra.append("--reconnect-interval=1")
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            memtier(args, port, tls, extra, out.name)
            report = json.load(open(out.name))
        after, cpu_after = stats(plain), cpu_seconds(server.pid)
    finally:
        server.terminate()
        server.wait()
    delta = lambda key: int(after.get(key, 0)) - int(before.get(key, 0))
    operations = delta("cmd_get") + delta("cmd_set")
    connections = delta("total_connections")
    cpu = cpu_after - cpu_before
    totals = report["ALL STATS"]["Totals"]
    percentiles = totals.get("Percentile Latencies", {})
    return {
        "server": name, "tls": tls, "pipeline": pipeline, "ops_s": totals["Ops/sec"],
        "cpu_us_op": cpu / max(1, operations) * 1e6, "p50_us": percentiles.get("p50.00", 0) * 1000,
        "p99_us": percentiles.get("p99.00", 0) * 1000, "connections": connections,
        "handshakes_s_core": connections / cpu if cpu > 0 else 0,
        "handshake_errors": delta("ssl_handshake_errors"),
    }



def idle_memory(command, count=1000):
    """Resident memory per idle TLS connection: `count` clients connect, finish the handshake
    and one request, then stay silent (Python's ssl module, OpenSSL)."""
    import resource
    import ssl
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    port = free_port()
    server = subprocess.Popen(command + ["-p", str(port), "-U", "0", "-l", f"127.0.0.1:{port}", "-c", "4096", "-Z",
                                         "-o", f"ssl_chain_cert={CERTS}/server.pem,ssl_key={CERTS}/server.key"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=f"{CERTS}/ca.pem")
    clients = []

    def connect(n):
        for _ in range(n):
            client = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
            client.sendall(b"version\r\n")
            client.recv(100)
            clients.append(client)

    try:
        wait_port(port)
        connect(100)
        time.sleep(0.3)
        before = rss_bytes(server.pid)
        connect(count)
        time.sleep(0.3)
        return (rss_bytes(server.pid) - before) / count
    finally:
        for client in clients:
            client.close()
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memtier", default=os.path.expanduser("~/.cache/memtier/src/memtier_benchmark"))
    parser.add_argument("--quicksilver", default=os.path.join(ROOT, "target/release/quicksilver"))
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--data-size", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--only", default="", help="comma-separated server names (default: both)")
    args = parser.parse_args()
    run_as = ["-u", "nobody"] if os.geteuid() == 0 else []
    servers = [
        ("quicksilver", [args.quicksilver, "-t", "1", "-m", "256"]),
        ("memcached", ["memcached"] + run_as + ["-t", "1", "-m", "256"]),
    ]
    if args.only:
        servers = [server for server in servers if server[0] in args.only.split(",")]
    print(f"{args.keys} keys of {args.data_size} B, set:get 1:9, {args.connections} connections, {args.seconds} s; "
          f"server on core 0 (1 worker), memtier on core 1")
    print("| server | transport | pipeline | ops/s | CPU us/op | TLS/plain CPU | p50 us | p99 us |")
    print("|---|---|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for pipeline in (1, 16):
            for name, command in servers:
                plain = point(args, name, command, False, pipeline)
                tls = point(args, name, command, True, pipeline)
                for r in (plain, tls):
                    ratio = r["cpu_us_op"] / plain["cpu_us_op"]
                    print(f"| {name} | {'TLS' if r['tls'] else 'plain'} | {pipeline} | {r['ops_s']:.0f} | "
                          f"{r['cpu_us_op']:.2f} | {ratio:.2f}x | {r['p50_us']:.0f} | {r['p99_us']:.0f} |", flush=True)
    print()
    print("Handshakes (memtier reconnects after every request):")
    print("| server | connections/s | handshakes per CPU-second | CPU us/handshake | handshake errors |")
    print("|---|---|---|---|---|")
    for name, command in servers:
        r = point(args, name, command, True, 1, handshakes=True)
        print(f"| {name} | {r['ops_s']:.0f} | {r['handshakes_s_core']:.0f} | "
              f"{1e6 / max(1, r['handshakes_s_core']):.0f} | {r['handshake_errors']} |", flush=True)
    print()
    print("Memory per idle TLS connection (1,000 clients after a handshake and one request):")
    for name, command in servers:
        print(f"- {name}: {idle_memory(command) / 1024:.1f} KiB", flush=True)


if __name__ == "__main__":
    main()
