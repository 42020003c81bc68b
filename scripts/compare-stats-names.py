#!/usr/bin/env python3
"""The names `stats`, `stats settings`, `stats items`, `stats slabs` and `stats conns` print, memcached
1.6.18's against quicksilver's (release build), after one set and one get; -v prints both values of
every shared name. The table in docs/COMPATIBILITY.md ("stats names") comes from it.

    scripts/compare-stats-names.py [-v]
"""
import os
import re
import socket
import subprocess
import sys
import time
def stats(port, group):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"set k 0 0 5\r\nhello\r\nget k\r\n")
    d=b""
    while not d.endswith(b"END\r\n"): d+=s.recv(65536)
    s.sendall(f"stats {group}\r\n".encode() if group else b"stats\r\n")
    d=b""
    while not d.endswith(b"END\r\n"): d+=s.recv(65536)
    out={}
    for line in d.decode().splitlines():
        if line.startswith("STAT "):
            _, name, *v = line.split(" ", 2)
            v = v[0] if v else ""
            if group == "items": name = re.sub(r"^items:\d+:", "", name)
            elif group == "slabs": name = re.sub(r"^\d+:", "", name)
            elif group == "conns": name = re.sub(r"^\d+:", "", name)
            out[name]=v
    s.close()
    return out
procs=[]
mc=subprocess.Popen(["memcached","-u","nobody","-p","27601","-l","127.0.0.1","-U","0"]); procs.append(mc)
qs=subprocess.Popen([os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target/release/quicksilver"),"-p","27602","-l","127.0.0.1","-U","0"]); procs.append(qs)
time.sleep(1)
try:
    for g in ["", "settings", "items", "slabs", "conns"]:
        a=stats(27601,g); b=stats(27602,g)
        print(f"== stats {g}: memcached {len(a)}, quicksilver {len(b)}")
        print("  only memcached:", " ".join(sorted(set(a)-set(b))))
        print("  only quicksilver:", " ".join(sorted(set(b)-set(a))))
        if "-v" in sys.argv:
            for n in sorted(set(a)&set(b)): print("   ", n, "|", a[n], "|", b[n])
finally:
    for p in procs: p.kill()
