"""What the side-by-side scripts (bench-flash.py, bench-tls.py, bench-memtier.py) share: a
server's CPU time and memory from /proc, its `stats`, waiting for its port, a free port."""
import os
import socket
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid):
    """User plus system CPU time of process `pid` (/proc/PID/stat), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_bytes(pid, field="VmRSS"):
    """Resident memory of process `pid` (VmRSS; `field="VmHWM"` for its peak), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def stats(port, group=""):
    """`stats` (or `stats GROUP`) of the server on 127.0.0.1:`port` (plaintext), as a dict of
    strings."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"stats {group}".rstrip().encode() + b"\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += s.recv(65536)
    return dict(line.split(" ")[1:3] for line in data.decode().split("\r\n") if line.startswith("STAT "))


def request(port, data, until=None):
    """Sends `data` to 127.0.0.1:`port` and returns the reply, read until it ends with `until`
    (or, without one, until the server closes the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        reply = b""
        while until is None or not reply.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


def wait_port(port):
    """Waits (up to 20 s) until 127.0.0.1:`port` accepts a connection; exits otherwise."""
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing answers on port {port}")


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
