#!/usr/bin/env python3
"""What a script costs (issue 76): user-space instructions under callgrind (every server
thread), as scripts/instructions.py counts them, for 50 connections each sending batches of
`depth` lock releases, redis-py's and Redlock's script (GET the key, compare it with the token,
DEL it if it matches) sent with EVALSHA, each after the SET that took the lock
(`SET key token PX 30000`), over 100,000 keys, against quicksilver (`-t 1`) and
redis-server; and the same SETs alone, so the EVALSHA's own share is their difference.

    scripts/bench-scripts.py                 depth 1 and 16
    scripts/bench-scripts.py --batches 400   per connection (default 200 at depth 1, 20 at 16)
    scripts/bench-scripts.py --depths 1 --keep /tmp/cg   one depth, its callgrind dumps kept
    scripts/bench-scripts.py --cpu           server CPU time per EVALSHA instead, under
                                             redis-benchmark (rounds interleaved; see cpu_main)
"""
import argparse
import glob
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import instructions as ins  # noqa: E402
from benchlib import cpu_seconds, free_port, wait_port  # noqa: E402

RELEASE = (b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
           b"else return 0 end")


def frame(*words):
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def batches(seed, count, depth, sha, release):
    rng = random.Random(seed)
    for _ in range(count):
        batch = []
        for _ in range(depth):
            key = b"lock:%d" % rng.randint(1, 100_000)
            batch.append(frame(b"SET", key, b"token", b"PX", b"30000"))
            if release:
                batch.append(frame(b"EVALSHA", sha, b"1", key, b"token"))
        yield batch


def load_script(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(frame(b"SCRIPT", b"LOAD", RELEASE))
        reply = s.recv(1024)
    assert reply.startswith(b"$40\r\n"), reply
    return reply[5:45]


def measure(cmd, port, count, depth, keep=None, name=""):
    out = tempfile.mkdtemp(prefix="qs-bench-scripts-")
    path = os.path.join(out, "cg.out")
    log = os.path.join(out, "valgrind.log")
    with open(log, "w") as f:
        # Names written whole in every dump, so a kept one reads on its own.
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--compress-strings=no", f"--callgrind-out-file={path}", *cmd],
                                stdout=subprocess.DEVNULL, stderr=f)
    results = {}
    try:
        ins.wait_listening(port, proc, log)
        sha = load_script(port)
        for release in (False, True):
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
            before = set(glob.glob(path + ".*"))
            ins.drive(port, "resp", [batches(c, count, depth, sha, release) for c in range(ins.CONNECTIONS)])
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            instructions, dump = ins.dumped_instructions(path, before)
            if keep:
                os.makedirs(keep, exist_ok=True)
                label = f"{name.split()[0]}-{depth}-{'release' if release else 'set'}.callgrind"
                shutil.copy(dump, os.path.join(keep, label))
            results["release" if release else "set"] = instructions / (ins.CONNECTIONS * count * depth)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(out, ignore_errors=True)
    return results


def preload(port, count):
    """`SET lock:N token` for N below `count`: every lock taken, so a release finds its token."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        for start in range(0, count, 1000):
            batch = b"".join(frame(b"SET", b"lock:%012d" % n, b"token") for n in range(start, min(start + 1000, count)))
            s.sendall(batch)
            want, got = b"+OK\r\n" * (min(start + 1000, count) - start), b""
            while len(got) < len(want):
                got += s.recv(65536)


def cpu_main(args):
    """Server CPU time (user + system, /proc) per EVALSHA of the release script, sent by
    redis-benchmark (50 connections, random keys lock:N of 100,000, each taken first with
    `SET lock:N token`: a release finds its token and deletes it, a second one of the same key
    finds none), quicksilver `-t 1` and redis-server 7.0 both running, their rounds
    interleaved; the median of `--rounds` per server and depth."""
    binary = os.path.join(ins.ROOT, "target", "release", "quicksilver")
    servers = []
    try:
        port, resp = free_port(), free_port()
        proc = subprocess.Popen([binary, "-t", "1", "-p", str(port), "-U", "0", "-m", "256",
                                 "-l", f"proto[resp]:127.0.0.1:{resp}"], stdout=subprocess.DEVNULL)
        servers.append(("quicksilver -t 1", resp, proc))
        port = free_port()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL)
        servers.append(("redis-server 7.0", port, proc))
        for _, port, _ in servers:
            wait_port(port)
        shas = {name: load_script(port) for name, port, _ in servers}
        print("| server | depth | CPU µs per EVALSHA (median) | rounds |\n|---|---|---|---|")
        for depth in (int(depth) for depth in args.depths.split(",")):
            requests = 200_000 if depth > 1 else 60_000
            results = {name: [] for name, _, _ in servers}
            for _ in range(args.rounds):
                for name, port, proc in servers:
                    preload(port, 100_000)
                    before = cpu_seconds(proc.pid)
                    subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(requests), "-P", str(depth),
                                    "-r", "100000", "-q", "EVALSHA", shas[name].decode(), "1", "lock:__rand_int__",
                                    "token"], check=True, capture_output=True)
                    results[name].append((cpu_seconds(proc.pid) - before) / requests * 1e6)
            for name, samples in results.items():
                print(f"| {name} | {depth} | {sorted(samples)[len(samples) // 2]:.2f} | "
                      f"{', '.join(f'{x:.2f}' for x in samples)} |", flush=True)
    finally:
        for _, _, proc in servers:
            proc.terminate()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, help="batches per connection")
    parser.add_argument("--keep", help="copy each callgrind dump into this folder (for callgrind_annotate)")
    parser.add_argument("--depths", default="1,16", help="the depths to measure (default 1,16)")
    parser.add_argument("--cpu", action="store_true", help="CPU time per EVALSHA under redis-benchmark instead")
    parser.add_argument("--rounds", type=int, default=5, help="with --cpu: rounds per server and depth")
    args = parser.parse_args()
    if args.cpu:
        return cpu_main(args)
    binary = os.path.join(ins.ROOT, "target", "release", "quicksilver")
    print("| server | depth | SET | SET + EVALSHA release | the EVALSHA |\n|---|---|---|---|---|")
    for depth in (int(depth) for depth in args.depths.split(",")):
        count = args.batches or (200 if depth == 1 else 20)
        servers = []
        port, resp = free_port(), free_port()
        servers.append(("quicksilver -t 1", resp, [binary, "-t", "1", "-p", str(port), "-U", "0", "-m", "256",
                                                  "-l", f"proto[resp]:127.0.0.1:{resp}"]))
        if shutil.which("redis-server"):
            port = free_port()
            servers.append(("redis-server 7.0", port, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                                       "--save", "", "--appendonly", "no"]))
        for name, port, cmd in servers:
            r = measure(cmd, port, count, depth, args.keep, name)
            print(f"| {name} | {depth} | {r['set']:,.0f} | {r['release']:,.0f} | {r['release'] - r['set']:,.0f} |",
                  flush=True)
    print("(user-space instructions per lock: per SET, and per SET and its release)")


if __name__ == "__main__":
    main()
