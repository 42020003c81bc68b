"""redis-py on numbered databases, as a client given redis://host:port/N uses them: each
database's keys apart, a pipeline (MULTI/EXEC) and a Lock in database 1, FLUSHDB of one
database leaving the others. Exits non-zero on the first difference.

    python3 redis_py_databases.py PORT
"""
import sys

import redis

port = int(sys.argv[1])
url = f"redis://127.0.0.1:{port}"
zero = redis.Redis.from_url(url + "/0")
one = redis.Redis.from_url(url + "/1")
fifteen = redis.Redis.from_url(url + "/15")
zero.flushall()

zero.set("session:1", "in-zero")
one.set("session:1", "in-one")
assert zero.get("session:1") == b"in-zero"
assert one.get("session:1") == b"in-one"
assert fifteen.get("session:1") is None

# Django's and Laravel's set_many / putMany: a transaction in database 1.
with one.pipeline(transaction=True) as pipe:
    pipe.set("a", 1).setex("b", 60, 2).incr("a")
    assert pipe.execute() == [True, True, 2]
assert one.mget("a", "b", "c") == [b"2", b"2", None]
assert zero.mget("a", "b") == [None, None]
assert 0 < one.ttl("b") <= 60

# A lock in database 1 (SET NX PX, EVALSHA release).
lock = one.lock("resource", timeout=10)
assert lock.acquire(blocking=False)
assert not one.lock("resource", timeout=10).acquire(blocking=False)
assert zero.lock("resource", timeout=10).acquire(blocking=False)
lock.release()
assert one.get("resource") is None

assert sorted(one.scan_iter("*")) == [b"a", b"b", b"session:1"]
assert one.dbsize() == 3
one.flushdb()
assert one.dbsize() == 0
assert zero.get("session:1") == b"in-zero"
assert zero.dbsize() == 2  # session:1 and the lock zero took
print("redis-py databases: ok")
