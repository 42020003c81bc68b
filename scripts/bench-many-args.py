#!/usr/bin/python3
"""One RESP request of many arguments sent a 64 KiB piece at a time (issue 74): a DEL of N keys
of 30 bytes (default 1,048,575) to the server on 127.0.0.1:PORT whose process is PID, with
another connection sending PING every millisecond meanwhile. Prints the reply, the server's CPU
time for the request (/proc), the wall time, and the PINGs' p50 and p99.

    /usr/bin/python3 scripts/bench-many-args.py PORT PID NAME [N]
"""
import socket, sys, time, os, threading
port=int(sys.argv[1]); pid=int(sys.argv[2])
HZ=os.sysconf("SC_CLK_TCK")
def cpu():
    f=open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split(); return (int(f[11])+int(f[12]))/HZ
n=int(sys.argv[4]) if len(sys.argv)>4 else (1<<20) - 1
parts=[b"*%d\r\n$3\r\nDEL\r\n" % (n+1)]
for i in range(n):
    k=b"k%029d" % i
    parts.append(b"$30\r\n"+k+b"\r\n")
req=b"".join(parts)
lat=[]; stop=False
def pinger():
    s=socket.create_connection(("127.0.0.1",port))
    while not stop:
        t=time.time(); s.sendall(b"PING\r\n"); s.recv(100); lat.append(time.time()-t); time.sleep(0.001)
th=threading.Thread(target=pinger); th.start()
s=socket.create_connection(("127.0.0.1",port))
c0=cpu(); t0=time.time()
for i in range(0,len(req),65536):
    s.sendall(req[i:i+65536])
r=s.recv(100)
t1=time.time(); c1=cpu()
stop=True; th.join()
lat.sort()
print(sys.argv[3], "reply",r,"cpu %.2f s"%(c1-c0),"wall %.2f s"%(t1-t0),"ping p50 %.2f ms p99 %.2f ms"%(lat[len(lat)//2]*1000, lat[int(len(lat)*.99)]*1000), "request", len(req))
