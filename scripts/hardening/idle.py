# RSS growth per idle connection, quicksilver against memcached, and a depth-1 get round trip
# of another client meanwhile. Usage: idle.py N QS_BIN. The connections are opened by two
# client processes (this machine's hard open-file limit is 20,000 per process).
import os, socket, sys, time
from procs import rss_kib, start
N = int(sys.argv[1]); QS = sys.argv[2]
def rtt(s, n=2000):
    t0 = time.time()
    for _ in range(n):
        s.sendall(b"get k\r\n"); s.recv(100)
    return (time.time() - t0) / n * 1e6
def holder(port, count, ready_w, go_r):
    conns = []
    for i in range(count):
        c = socket.create_connection(("127.0.0.1", port)); conns.append(c)
        if i % 3 == 0: c.sendall(b"get k\r\n")
    for i, c in enumerate(conns):
        if i % 3 == 0: c.recv(100)
    os.write(ready_w, b"x"); os.read(go_r, 1); os._exit(0)
def run(name, cmd):
    p, port, s = start(cmd + ["-c", str(N + 10)])
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"set k 0 0 5\r\nhello\r\n"); s.recv(100)
    before = rtt(s); time.sleep(0.2); base = rss_kib(p.pid)
    kids = []
    for half in (N // 2, N - N // 2):
        ready_r, ready_w = os.pipe(); go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0: holder(port, half, ready_w, go_r)
        kids.append((pid, ready_r, go_w))
    for _, ready_r, _ in kids: os.read(ready_r, 1)
    time.sleep(1)
    grown = rss_kib(p.pid) - base
    during = rtt(s)
    print(f"{name}: {N} idle connections grew RSS by {grown/1024:.1f} MiB = {grown*1024/N:.0f} B each; "
          f"depth-1 get round trip {before:.0f} us before, {during:.0f} us with them open", flush=True)
    for pid, _, go_w in kids: os.write(go_w, b"x"); os.waitpid(pid, 0)
    p.kill(); p.wait()
run("quicksilver", [QS, "-t", "2"])
run("memcached", ["memcached", "-t", "2", "-U", "0", "-u", "root"])
