#!/usr/bin/python3
"""A grammar-based stress test of whole command streams against the real server binary (issue
74): for a bounded time, at -m 8 (2 MiB partitions, the smallest), with one worker and with two,
one verified client per dialect (RESP and memcached's text and meta, each on a server of its
own) sends random pipelines of writes of any size up to the item limit, each followed by a
read of the key it wrote, while chaos clients send random commands of both dialects (long
keys, HTTP lines, half requests, garbage, small values) beside them. Checked: every request is answered; the server never stops
or panics (its stderr is watched for "panicked"); every acknowledged write's next read answers
exactly what was written (nothing else writes a verified client's keys, and a write just
acknowledged may not be evicted before it is read); fresh connections are answered at the end.

    cargo build --release -p qs-server
    python3 scripts/stress.py [--seed N] [--seconds S] [--bin target/release/quicksilver]

A failure prints the seed; the same seed replays the same streams (their interleaving with the
chaos clients is the machine's).
"""
import argparse
import os
import random
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ITEM_MAX = 1 << 20
REPLY_TIMEOUT = 60


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


class Reader:
    """Reads replies from a socket: RESP values, or memcached lines and value blocks."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def resp(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            return None if int(rest) < 0 else self.exactly(int(rest))
        if kind == b"*":
            return [self.resp() for _ in range(int(rest))]
        return line


def value_len(rng):
    """Sizes of every scale: mostly small, some near the item limit and half a partition."""
    return rng.choice([rng.randint(0, 64), rng.randint(64, 8192), rng.randint(8192, 300_000),
                       rng.randint(300_000, ITEM_MAX - 4096), rng.randint(880_000, 940_000)])


def verified_resp(port, rng, deadline, errors):
    """RESP pipelines of writes, each followed by a read of its key, checked."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(REPLY_TIMEOUT)
    reader, rounds = Reader(sock), 0
    while time.monotonic() < deadline and not errors:
        batch, checks = b"", []
        for _ in range(rng.randint(1, 8)):
            key = f"v:{rng.randint(0, 15)}".encode()
            op = rng.choice(["set", "set", "append", "setrange", "incr", "del", "copy"])
            if op == "set":
                value = bytes([rng.randint(97, 122)]) * value_len(rng)
                batch += resp("SET", key, value)
                checks.append(("set", key, value))
            elif op == "append":
                data = b"a" * rng.randint(1, 70_000)
                batch += resp("APPEND", key, data)
                checks.append(("append", key, data))
            elif op == "setrange":
                offset, data = rng.randint(0, 950_000), b"r" * rng.randint(1, 100)
                batch += resp("SETRANGE", key, offset, data)
                checks.append(("setrange", key, (offset, data)))
            elif op == "incr":
                batch += resp("INCR", key)
                checks.append(("incr", key, None))
            elif op == "del":
                batch += resp("DEL", key)
                checks.append(("del", key, None))
            else:
                target = f"v:{rng.randint(0, 15)}".encode()
                batch += resp("COPY", key, target, "REPLACE")
                checks.append(("copy", key, target))
            batch += resp("GET", checks[-1][2] if op == "copy" else key)
        sock.sendall(batch)
        for op, key, arg in checks:
            reply, got = reader.resp(), reader.resp()
            check_resp(op, key, arg, (reply, got), errors)
        rounds += 1
    sock.close()
    return rounds


def check_resp(op, key, arg, replies, errors):
    """What the read right after an acknowledged write must answer: the value a SET wrote, a
    value of the length APPEND and SETRANGE answered, the count INCR answered, nothing after a
    DEL, something after a COPY that copied. A refusal (an error) is checked for its words."""
    reply, got = replies
    if isinstance(reply, bytes) and reply.startswith(b"-"):
        known = (b"-ERR object too large for cache", b"-ERR value is not an integer or out of range",
                 b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)",
                 b"-ERR source and destination objects are the same")
        if reply not in known:
            errors.append(f"RESP {op} {key!r}: {reply[:200]!r}")
        return
    wanted = {
        "set": lambda: got == arg,
        "append": lambda: got is not None and b":%d" % len(got) == reply,
        "setrange": lambda: got is not None and b":%d" % len(got) == reply,
        "incr": lambda: got is not None and b":" + got == reply,
        "del": lambda: got is None,
        "copy": lambda: reply == b":0" or got is not None,
    }[op]
    if not wanted():
        shown = None if got is None else (len(got), got[:20])
        errors.append(f"RESP {op} {key!r}: acknowledged {reply[:40]!r}, the next read answered {shown}")


def verified_text(port, rng, deadline, errors):
    """memcached text and meta writes of any size, each followed by a read, checked."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(REPLY_TIMEOUT)
    reader, rounds = Reader(sock), 0
    while time.monotonic() < deadline and not errors:
        key = f"t:{rng.randint(0, 15)}"
        value = bytes([rng.randint(97, 122)]) * value_len(rng)
        if rng.random() < 0.5:
            sock.sendall(b"set %s 0 0 %d\r\n%s\r\nmg %s v\r\n" % (key.encode(), len(value), value, key.encode()))
            stored = reader.line()
        else:
            sock.sendall(b"ms %s %d T0\r\n%s\r\nmg %s v\r\n" % (key.encode(), len(value), value, key.encode()))
            stored = reader.line()
        head = reader.line()
        got = reader.exactly(int(head.split()[1])) if head.startswith(b"VA ") else None
        if stored in (b"STORED", b"HD") and got != value:
            errors.append(f"text {key}: stored {len(value)} bytes, the next read answered "
                          f"{None if got is None else len(got)}")
        elif stored not in (b"STORED", b"HD") and not stored.startswith(b"SERVER_ERROR"):
            errors.append(f"text {key}: {stored!r} to a store of {len(value)} bytes")
        rounds += 1
    sock.close()
    return rounds


CHAOS_TEXT = [b"get %s\r\n", b"set %s 0 0 5\r\nhello\r\n", b"delete %s\r\n", b"incr %s 1\r\n",
              b"mg %s v t\r\n", b"append %s 0 0 2\r\nxy\r\n", b"touch %s 10\r\n", b"gat 0 %s\r\n",
              b"set %s 0 0 10\r\nshort\r\n", b"\x80\x00\x00\x00", b"POST / HTTP/1.1\r\n", b"stats\r\n"]
CHAOS_RESP = [("GET",), ("SET", "v"), ("DEL",), ("INCR",), ("EXPIRE", "5"), ("TTL",), ("APPEND", "xyz"),
              ("SCAN", "0"), ("MGET", "c:1", "c:2"), ("EXPIREAT", "33177117420"), ("COPY", "c:9"),
              ("GETRANGE", "0", "-1"), ("SETRANGE", "5", "zz"), ("MSET", "c:1", "a", "c:2", "b")]


def chaos(port, resp_port, rng, deadline, errors):
    """Random commands of both dialects, some broken, on connections that come and go."""
    while time.monotonic() < deadline and not errors:
        which = rng.choice([port, resp_port])
        try:
            sock = socket.create_connection(("127.0.0.1", which))
            sock.settimeout(REPLY_TIMEOUT)
            batch = b""
            for _ in range(rng.randint(1, 30)):
                key = rng.choice([f"c:{rng.randint(0, 40)}", "k" * rng.choice([250, 251, 300, 70000])])
                if which == port:
                    batch += rng.choice(CHAOS_TEXT).replace(b"%s", key.encode())
                else:
                    command = rng.choice(CHAOS_RESP)
                    batch += resp(command[0], key, *command[1:])
            if rng.random() < 0.2:
                batch = batch[: rng.randint(0, len(batch))]
            sock.sendall(batch)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):
                pass
            sock.close()
        except (ConnectionError, socket.timeout, OSError) as error:
            if isinstance(error, socket.timeout):
                errors.append(f"chaos client on {which}: no end within {REPLY_TIMEOUT} s")


def watch_stderr(server, lines):
    for line in server.stderr:
        lines.append(line.decode(errors="replace"))


def start(binary, threads):
    """A server at -m 8 with text and RESP listeners; its ports and the lines of its stderr."""
    port, resp_port = benchlib.free_port(), benchlib.free_port()
    server = subprocess.Popen(
        [binary, "-p", str(port), "-m", "8", "-t", str(threads), "-U", "0",
         "-l", f"127.0.0.1,proto[resp]:127.0.0.1:{resp_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = []
    threading.Thread(target=watch_stderr, args=(server, stderr), daemon=True).start()
    benchlib.wait_port(port)
    benchlib.wait_port(resp_port)
    return server, (port, resp_port), stderr


def finish(server, ports, stderr, errors):
    """The server still runs, answers fresh connections, stops when asked, never panicked."""
    port, resp_port = ports
    if server.poll() is not None:
        errors.append(f"the server stopped with status {server.returncode}")
    else:
        for _ in range(8):
            for probe, ask, want in [(port, b"version\r\n", b"VERSION"), (resp_port, b"PING\r\n", b"+PONG")]:
                try:
                    reply = benchlib.request(probe, ask, until=b"\r\n")
                    if not reply.startswith(want):
                        errors.append(f"a fresh connection to {probe} got {reply!r}")
                except OSError as error:
                    errors.append(f"a fresh connection to {probe}: {error}")
        server.terminate()
        server.wait(timeout=30)
    time.sleep(0.2)
    if any("panicked" in line for line in stderr):
        errors.append("the server panicked: " + "".join(stderr)[-2000:])


def run(binary, threads, seed, seconds):
    """Two servers side by side, each with one verified client (RESP on one, text and meta on
    the other: the only writers of large values there, so nothing but their own writes can
    evict what they just wrote) and a chaos client."""
    deadline, errors, rounds = time.monotonic() + seconds, [], {}
    servers = [start(binary, threads), start(binary, threads)]
    (_, (_, resp_port), _), (_, (text_port, _), _) = servers
    clients = [("resp", lambda rng: verified_resp(resp_port, rng, deadline, errors)),
               ("text", lambda rng: verified_text(text_port, rng, deadline, errors))]
    clients += [(f"chaos{n}", lambda rng, ports=ports: chaos(*ports, rng, deadline, errors))
                for n, (_, ports, _) in enumerate(servers)]

    def body(name, work, n):
        try:
            rounds[name] = work(random.Random(seed * 16 + n))
        except Exception as error:  # noqa: BLE001: any failure of a client is the server's
            errors.append(f"{name}: {type(error).__name__}: {error}")

    running = [threading.Thread(target=body, args=(name, work, n)) for n, (name, work) in enumerate(clients)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    for server, ports, stderr in servers:
        finish(server, ports, stderr, errors)
    return errors, {name: count for name, count in rounds.items() if count is not None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    parser.add_argument("--seconds", type=float, default=20, help="per worker count")
    parser.add_argument("--bin", default=os.path.join(benchlib.ROOT, "target/release/quicksilver"))
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    failed = 0
    for threads in (1, 2):
        errors, rounds = run(args.bin, threads, seed, args.seconds)
        status = "ok" if not errors else "FAILED"
        print(f"stress -t {threads} seed {seed}: {status}; rounds {rounds}")
        for error in errors[:10]:
            print("  " + error)
        failed += bool(errors)
    print(f"{2 - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
