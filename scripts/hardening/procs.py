# What the hardening measurements share: a free loopback port, a server started on it (and
# the first connection it accepts), and the server's RSS and CPU from /proc.
import os, socket, subprocess, time

HZ = os.sysconf("SC_CLK_TCK")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start(cmd, poll=0.01):
    """Starts `cmd` plus -p on a free port; returns the process, the port and its first connection."""
    port = free_port()
    p = subprocess.Popen(cmd + ["-p", str(port)], stderr=subprocess.DEVNULL)
    while True:
        try: return p, port, socket.create_connection(("127.0.0.1", port))
        except OSError: time.sleep(poll)

def rss_kib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])

def cpu_ticks(pid):
    """utime + stime of the process, in clock ticks (HZ a second)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
