# Start-up time (process start to first accepted connection), RSS then, and maxbytes.
# Usage: startup.py BIN [LABEL] -- MEGABYTES...
import sys, time
from procs import rss_kib, start
def run(label, cmd, m):
    t0 = time.time()
    p, _, s = start(cmd + ["-m", m, "-t", "2"], poll=0.001)
    t = time.time() - t0; r = rss_kib(p.pid) / 1024
    s.sendall(b"stats settings\r\n"); buf = b""
    while not buf.endswith(b"END\r\n"): buf += s.recv(65536)
    mb = [l.split()[2] for l in buf.decode().split("\r\n") if l.startswith("STAT maxbytes ")][0]
    print(f"{label:12} -m {m:>5}: accepts after {t*1000:6.0f} ms, RSS {r:7.1f} MiB, maxbytes {mb}", flush=True)
    p.kill(); p.wait()
label = sys.argv[2]; sizes = sys.argv[sys.argv.index("--") + 1:]
for m in sizes:
    cmd = ["memcached", "-U", "0", "-u", "root"] if sys.argv[1] == "memcached" else [sys.argv[1]]
    run(label, cmd, m)
