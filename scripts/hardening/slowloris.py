# Server CPU while N connections each dribble one byte every 100 ms (a request per 1.2 s),
# quicksilver against memcached. Usage: slowloris.py QS_BIN [N] [SECONDS]
import socket, sys, time
from procs import HZ, cpu_ticks, start
qs = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
secs = float(sys.argv[3]) if len(sys.argv) > 3 else 10
def run(name, cmd):
    p, port, probe = start(cmd + ["-c", str(N + 100)])
    probe.sendall(b"set canary 0 0 5\r\nalive\r\n"); probe.recv(100)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(N)]
    for c in conns: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); c.setblocking(False)
    req = b"get canary\r\n"; answered = 0; t0 = time.time(); c0 = cpu_ticks(p.pid); i = 0
    while time.time() - t0 < secs:
        b = req[i % len(req): i % len(req) + 1]; i += 1
        for c in conns: c.send(b)
        for c in conns:
            try: answered += c.recv(4096).count(b"END\r\n")
            except BlockingIOError: pass
        time.sleep(0.1)
    used = cpu_ticks(p.pid) - c0; el = time.time() - t0
    print(f"{name}: {N} slowloris conns for {el:.1f} s: server CPU {used} ticks = {100*used/HZ/el:.1f}% of a core; {answered} requests answered")
    p.kill(); p.wait()
run("quicksilver", [qs, "-t", "2"])
run("memcached", ["memcached", "-t", "2", "-U", "0", "-u", "root"])
