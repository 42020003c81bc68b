#!/usr/bin/env python3
"""What a transaction costs against the same writes pipelined (issue 76): user-space
instructions under callgrind (every server thread), as scripts/instructions.py counts them,
for 50 connections each sending batches of 10 SETs of 32-byte values over 100,000 keys, either
pipelined or wrapped in MULTI ... EXEC, against quicksilver (`-t 1`: one worker owns every
key; `-t 2`: the keys of a batch spread over both, so EXEC borrows the other's partitions)
and redis-server.

    scripts/bench-tx.py                  quicksilver -t 1 and -t 2, and redis-server
    scripts/bench-tx.py --batches 200    per connection (default 100)
    scripts/bench-tx.py --keep DIR       each load's callgrind dump kept there
"""
import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import instructions as ins  # noqa: E402
from benchlib import free_port  # noqa: E402

SETS = 10


def frame(*words):
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def batches(seed, count, exec_):
    rng = random.Random(seed)
    for _ in range(count):
        sets = [frame(b"SET", b"memtier-%d" % rng.randint(1, 100_000), b"x" * 32) for _ in range(SETS)]
        if exec_:
            # MULTI's +OK, a +QUEUED each, EXEC's array head and its elements: one line each,
            # as the driver counts replies.
            yield [frame(b"MULTI") + b"".join(sets) + frame(b"EXEC")] + [b""] * (2 * SETS + 1)
        else:
            yield sets


def measure(cmd, port, count, keep=None, name=""):
    out = tempfile.mkdtemp(prefix="qs-bench-tx-")
    path = os.path.join(out, "cg.out")
    log = os.path.join(out, "valgrind.log")
    with open(log, "w") as f:
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", *cmd],
                                stdout=subprocess.DEVNULL, stderr=f)
    results = {}
    try:
        ins.wait_listening(port, proc, log)
        for exec_ in (False, True):
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
            before = set(glob.glob(path + ".*"))
            ins.drive(port, "resp", [batches(c, count, exec_) for c in range(ins.CONNECTIONS)])
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            instructions, dump = ins.dumped_instructions(path, before)
            if keep:
                os.makedirs(keep, exist_ok=True)
                shutil.copy(dump, os.path.join(keep, f"{name}-{'exec' if exec_ else 'pipelined'}.callgrind"))
            results["exec" if exec_ else "pipelined"] = instructions / (ins.CONNECTIONS * count * SETS)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(out, ignore_errors=True)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--keep", help="copy each load's callgrind dump into this folder")
    args = parser.parse_args()
    binary = os.path.join(ins.ROOT, "target", "release", "quicksilver")
    rows = []
    for workers in ("1", "2"):
        port, resp = free_port(), free_port()
        cmd = [binary, "-t", workers, "-p", str(port), "-U", "0", "-m", "256", "-l", f"proto[resp]:127.0.0.1:{resp}"]
        rows.append((f"quicksilver -t {workers}", measure(cmd, resp, args.batches, args.keep, f"qs-t{workers}")))
    if shutil.which("redis-server"):
        port = free_port()
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        rows.append(("redis-server 7.0", measure(cmd, port, args.batches, args.keep, "redis")))
    print("| server | 10 SETs pipelined | the same in MULTI/EXEC | ratio |\n|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['pipelined']:,.0f} | {r['exec']:,.0f} | {r['exec'] / r['pipelined']:.2f}x |")
    print("(user-space instructions per SET)")


if __name__ == "__main__":
    main()
