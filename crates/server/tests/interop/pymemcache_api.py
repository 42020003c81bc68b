"""pymemcache's whole client API against a server on 127.0.0.1:<port> (argv[1]).

Exits non-zero with a message on the first wrong answer. Run by crates/server/tests/interop.rs.
"""
import sys

from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient
from pymemcache import serde
from pymemcache.exceptions import MemcacheIllegalInputError, MemcacheClientError, MemcacheServerError

port = int(sys.argv[1])
c = Client(("127.0.0.1", port), connect_timeout=5, timeout=5, default_noreply=False)


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


c.flush_all()
check("version", c.version().startswith(b"1.6"), True)
check("set", c.set("a", b"1"), True)
check("get", c.get("a"), b"1")
check("get missing", c.get("missing"), None)
check("get default", c.get("missing", default=b"d"), b"d")
check("set_many", c.set_many({"b": b"2", "c": b"3"}), [])
check("get_many", c.get_many(["a", "b", "c", "zz"]), {"a": b"1", "b": b"2", "c": b"3"})
check("add present", c.add("a", b"x"), False)
check("add absent", c.add("d", b"4"), True)
check("replace absent", c.replace("nope", b"x"), False)
check("replace present", c.replace("d", b"44"), True)
check("append", c.append("d", b"5"), True)
check("prepend", c.prepend("d", b"3"), True)
check("after append/prepend", c.get("d"), b"3445")
value, cas = c.gets("d")
check("gets", value, b"3445")
check("cas match", c.cas("d", b"new", cas), True)
check("cas stale", c.cas("d", b"newer", cas), False)
check("cas missing", c.cas("nothing", b"x", cas), None)
got = c.gets_many(["a", "d"])
check("gets_many keys", sorted(got), ["a", "d"])
check("delete", c.delete("a"), True)
check("delete missing", c.delete("a"), False)
check("delete_many", c.delete_many(["b", "c"]), True)
check("get_multi after delete", c.get_multi(["a", "b", "c"]), {})
check("incr missing", c.incr("n", 1), None)
c.set("n", b"10")
check("incr", c.incr("n", 5), 15)
check("decr", c.decr("n", 20), 0)
check("touch present", c.touch("n", 100), True)
check("touch missing", c.touch("nope", 100), False)
if hasattr(c, "gat"):  # pymemcache 4 and later
    check("gat", c.gat("n", 100), b"0 ")
    check("gats", c.gats("n", 100)[0], b"0 ")
check("noreply set", c.set("q", b"quiet", noreply=True), True)
check("noreply visible", c.get("q"), b"quiet")
check("expire", c.set("gone", b"x", expire=-1), True)
check("expired", c.get("gone"), None)
check("flags", c.set("f", b"v"), True)
big = b"x" * (512 * 1024)
check("big set", c.set("big", big), True)
check("big get", c.get("big"), big)
try:
    c.set("big", b"x" * (2 * 1024 * 1024))
    sys.exit("too large: no error")
except MemcacheServerError as e:
    check("too large", "object too large" in str(e), True)
try:
    c.get("k" * 251)
    sys.exit("long key accepted")
except MemcacheIllegalInputError:
    pass
stats = c.stats()
for name in [b"pid", b"uptime", b"curr_items", b"get_hits", b"get_misses", b"cmd_get", b"cmd_set",
             b"bytes", b"curr_connections", b"total_connections", b"evictions", b"limit_maxbytes",
             b"threads"]:
    check(f"stat {name!r} present", name in stats, True)
check("stats settings", b"maxconns" in c.stats("settings"), True)
check("cache_memlimit-free flush", c.flush_all(), True)
check("after flush", c.get("d"), None)
# Serialization of Python objects (flags carry the type).
s = Client(("127.0.0.1", port), serde=serde.pickle_serde)
s.set("obj", {"x": [1, 2, 3]})
check("pickle round trip", s.get("obj"), {"x": [1, 2, 3]})
s.set("int", 42)
check("int round trip", s.get("int"), 42)
# Many servers through the hash client (all the same server here: exercises the client path).
h = HashClient([("127.0.0.1", port)])
h.set("hk", b"hv")
check("hash client", h.get("hk"), b"hv")
c.quit()
print("pymemcache: all checks passed")
