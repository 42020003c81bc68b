"""A cache workload through redis-py (Debian's python3-redis) against a RESP listener:
connect with the client's defaults, strings with TTLs, MGET, counters, deletes, expiry, a
non-transactional pipeline, and the client's errors. Exits non-zero on the first mismatch."""
import sys

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)

assert r.ping() is True
assert r.echo("hello") == b"hello"

# Sessions and fragments: SET with a TTL, GET, MGET.
assert r.set("session:1", "alice", ex=300) is True
assert r.get("session:1") == b"alice"
assert 295 <= r.ttl("session:1") <= 300, r.ttl("session:1")
assert r.set("fragment:home", b"<p>\x00\xff</p>", px=60000) is True
assert r.get("fragment:home") == b"<p>\x00\xff</p>"
assert r.mget(["session:1", "nope", "fragment:home"]) == [b"alice", None, b"<p>\x00\xff</p>"]
assert r.set("session:1", "bob", nx=True) is None
assert r.set("session:2", "carol", xx=True) is None
assert r.setnx("flag:beta", "on") is True
assert r.setnx("flag:beta", "off") is False
assert r.setex("short", 2, "x") is True
assert r.psetex("shorter", 1500, "y") is True

# Counters.
assert r.incr("hits") == 1
assert r.incrby("hits", 41) == 42
assert r.decr("hits") == 41
assert r.decrby("hits", 50) == -9
assert r.get("hits") == b"-9"
r.set("text", "abc")
try:
    r.incr("text")
    raise AssertionError("INCR of text succeeded")
except redis.ResponseError as error:
    assert "not an integer" in str(error), error

# Keyspace and expiry.
assert r.exists("session:1", "nope", "flag:beta") == 2
assert r.expire("flag:beta", 100) is True
assert 95 <= r.ttl("flag:beta") <= 100
assert r.ttl("nope") == -2
assert r.ttl("hits") == -1
assert r.delete("flag:beta") == 1
assert r.delete("flag:beta") == 0
assert r.get("flag:beta") is None

# A pipeline without MULTI: every reply in order.
pipe = r.pipeline(transaction=False)
for i in range(100):
    pipe.set(f"p:{i}", i, ex=60)
    pipe.incr("p:count")
    pipe.get(f"p:{i}")
replies = pipe.execute()
assert len(replies) == 300
for i in range(100):
    assert replies[3 * i] is True
    assert replies[3 * i + 1] == i + 1
    assert replies[3 * i + 2] == str(i).encode()

# A command out of scope is the client's error, and the connection stays usable.
try:
    r.xadd("h", {"f": "v"})
    raise AssertionError("XADD succeeded")
except redis.ResponseError as error:
    assert "unknown command" in str(error), error
assert r.get("p:7") == b"7"
print("ok")
