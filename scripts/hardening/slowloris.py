# Server CPU while N connections each dribble one byte every 100 ms (a request per 1.2 s),
# quicksilver against memcached. Usage: slowloris.py QS_BIN [N] [SECONDS]
import os, socket, subprocess, sys, time, resource
qs = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
secs = float(sys.argv[3]) if len(sys.argv) > 3 else 10

HZ = os.sysconf("SC_CLK_TCK")
def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def run(name, cmd):
    port = free_port()
    p = subprocess.Popen(cmd + ["-p", str(port), "-c", str(N + 100)], stderr=subprocess.DEVNULL)
    while True:
        try: probe = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.01)
    probe.sendall(b"set canary 0 0 5\r\nalive\r\n"); probe.recv(100)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(N)]
    for c in conns: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); c.setblocking(False)
    req = b"get canary\r\n"; answered = 0; t0 = time.time(); c0 = ticks(p.pid); i = 0
    while time.time() - t0 < secs:
        b = req[i % len(req): i % len(req) + 1]; i += 1
        for c in conns: c.send(b)
        for c in conns:
            try: answered += c.recv(4096).count(b"END\r\n")
            except BlockingIOError: pass
        time.sleep(0.1)
    used = ticks(p.pid) - c0; el = time.time() - t0
    print(f"{name}: {N} slowloris conns for {el:.1f} s: server CPU {used} ticks = {100*used/HZ/el:.1f}% of a core; {answered} requests answered")
    p.kill(); p.wait()
run("quicksilver", [qs, "-t", "2"])
run("memcached", ["memcached", "-t", "2", "-U", "0", "-u", "root"])
