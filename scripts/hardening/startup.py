# Start-up time (process start to first accepted connection), RSS then, and maxbytes.
# Usage: startup.py BIN [LABEL] -- MEGABYTES...
import socket, subprocess, time, sys
def rss_mib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def run(label, cmd, m):
    port = free_port(); t0 = time.time()
    p = subprocess.Popen(cmd + ["-m", m, "-t", "2", "-p", str(port)], stderr=subprocess.DEVNULL)
    while True:
        try: s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.001)
    t = time.time() - t0; r = rss_mib(p.pid)
    s.sendall(b"stats settings\r\n"); buf = b""
    while not buf.endswith(b"END\r\n"): buf += s.recv(65536)
    mb = [l.split()[2] for l in buf.decode().split("\r\n") if l.startswith("STAT maxbytes ")][0]
    print(f"{label:12} -m {m:>5}: accepts after {t*1000:6.0f} ms, RSS {r:7.1f} MiB, maxbytes {mb}", flush=True)
    p.kill(); p.wait()
label = sys.argv[2]; sizes = sys.argv[sys.argv.index("--") + 1:]
for m in sizes:
    cmd = ["memcached", "-U", "0", "-u", "root"] if sys.argv[1] == "memcached" else [sys.argv[1]]
    run(label, cmd, m)
