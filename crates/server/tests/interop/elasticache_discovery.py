"""ElastiCache cluster discovery with a real client: PyPI's elasticache-pyclient (its
MemcacheClient polls `config get cluster` on a configuration endpoint and re-shards its
python-memcached client when the version grows) against quicksilver's `-o cluster_config`.

    python elasticache_discovery.py CONFIG_PORT CONFIG_PID FLEET_FILE IP_A:PORT_A IP_B:PORT_B IP_C:PORT_C

Each node has a loopback address of its own: the client's hash ring (uhashring over
python-memcached) tells nodes apart by IP, as ElastiCache gives every node its own.

The fleet starts as A and B. A third node is added to the file and the endpoint is sent
SIGHUP; then B is removed and `config reload cluster` is sent. After each change the client
must see the new version and nodes within a few polls, and its sets must land on exactly the
nodes it was given (each node asked for every key). Exits non-zero on a failure.
"""
import os
import signal
import socket
import sys
import time

from elasticache_pyclient import MemcacheClient

config_port, config_pid, fleet, *ports = sys.argv[1:]
config_port, config_pid = int(config_port), int(config_pid)


def node(address):
    ip, port = address.split(":")
    return f"{ip}|{ip}|{port}"


def write_fleet(node_ports):
    with open(fleet + ".new", "w") as out:
        out.write("# the fleet\n" + "".join(node(address) + "\n" for address in node_ports))
    os.replace(fleet + ".new", fleet)


def command(address, line, until=b"\r\n"):
    if isinstance(address, int):
        address = f"127.0.0.1:{address}"
    ip, port = address.split(":")
    with socket.create_connection((ip, int(port))) as s:
        s.sendall(line)
        data = b""
        while not data.endswith(until):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def held(port, keys):
    """How many of `keys` node `port` holds."""
    count = 0
    for at in range(0, len(keys), 50):
        reply = command(port, ("get " + " ".join(keys[at:at + 50]) + "\r\n").encode(), b"END\r\n")
        count += reply.count(b"VALUE ")
    return count


def wait_for(client, version, node_ports, seconds=10):
    wanted = list(node_ports)
    deadline = time.time() + seconds
    while time.time() < deadline:
        with client.cluster.lock:
            if client.cluster.version == version and sorted(client.cluster.servers) == sorted(wanted):
                return True
        time.sleep(0.1)
    print(f"FAIL: wanted version {version} with {wanted}, have {client.cluster.version} {client.cluster.servers}")
    return False


def spread(client, phase, node_ports, count):
    """Sets `count` keys through the client; they must land on exactly `node_ports`."""
    keys = [f"{phase}:key:{i}" for i in range(count)]
    for key in keys:
        assert client.set(key, "value"), f"set {key}"
    for key in keys[::7]:
        assert client.get(key) == "value", f"get {key}"
    counts = {port: held(port, keys) for port in ports}
    holding = {port for port, n in counts.items() if n > 0}
    ok = sum(counts.values()) == count and holding == set(node_ports)
    print(("ok  " if ok else "FAIL") + f" {count} sets spread over {sorted(holding)}: {counts}")
    return ok


failures = 0
write_fleet(ports[:2])
command(config_port, b"config reload cluster\r\n")
client = MemcacheClient(f"127.0.0.1:{config_port}", ad_timeout=5, ad_interval=0.5)
try:
    start = client.cluster.version
    failures += not wait_for(client, start, ports[:2])
    failures += not spread(client, "two", ports[:2], 300)

    write_fleet(ports)
    os.kill(config_pid, signal.SIGHUP)
    failures += not wait_for(client, start + 1, ports)
    print("ok   SIGHUP: the client sees a node added")
    failures += not spread(client, "three", ports, 300)

    write_fleet([ports[0], ports[2]])
    reply = command(config_port, b"config reload cluster\r\n")
    failures += reply != b"OK\r\n"
    failures += not wait_for(client, start + 2, [ports[0], ports[2]])
    print("ok   config reload cluster: the client sees a node removed")
    failures += not spread(client, "again", [ports[0], ports[2]], 300)
finally:
    client.stop_timer()
sys.exit(1 if failures else 0)
