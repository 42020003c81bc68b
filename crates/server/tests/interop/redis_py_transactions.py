"""Transactions through redis-py (Debian's python3-redis) against a RESP listener, as the
libraries on top of it use them: `pipeline()` (a MULTI ... EXEC transaction by default, what
Django's RedisCache and django-redis send for set_many and delete_many), errors inside one,
WATCH with `Redis.transaction` (optimistic locking: concurrent increments from several threads
retried on WatchError add up exactly), and a watched key changed by another client. Exits
non-zero on the first mismatch; run against redis-server and quicksilver alike."""
import sys
import threading

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
r.flushall()

# set_many / get_many / delete_many, as Django's RedisCache sends them.
pipe = r.pipeline()
for i in range(50):
    pipe.set(f"django:{i}", f"value-{i}", ex=300)
assert pipe.execute() == [True] * 50
assert r.mget([f"django:{i}" for i in range(50)]) == [f"value-{i}".encode() for i in range(50)]
pipe = r.pipeline()
pipe.delete(*[f"django:{i}" for i in range(0, 50, 2)])
pipe.exists(*[f"django:{i}" for i in range(50)])
assert pipe.execute() == [25, 25]

# A command that fails inside EXEC takes its slot; the others run.
pipe = r.pipeline()
pipe.set("text", "abc").incr("text").set("after", "1")
try:
    pipe.execute()
    raise AssertionError("EXEC with a failing INCR raised nothing")
except redis.ResponseError as error:
    assert "not an integer" in str(error), error
assert r.get("after") == b"1"

# A command refused while queued aborts the whole transaction.
pipe = r.pipeline()
pipe.set("never", "1")
pipe.execute_command("NOSUCHCOMMAND")
try:
    pipe.execute()
    raise AssertionError("EXECABORT raised nothing")
except redis.ResponseError as error:
    assert "unknown command" in str(error).lower() or "EXECABORT" in str(error), error
assert r.get("never") is None

# Optimistic locking: WATCH, read, MULTI, write, EXEC, retried on WatchError.
r.set("counter", 0)


def add(times):
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)

    def step(pipe):
        value = int(pipe.get("counter"))
        pipe.multi()
        pipe.set("counter", value + 1)

    for _ in range(times):
        client.transaction(step, "counter")


threads = [threading.Thread(target=add, args=(100,)) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert int(r.get("counter")) == 400, r.get("counter")

# A watched key another client writes: EXEC runs nothing (WatchError).
other = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
with r.pipeline() as pipe:
    pipe.watch("balance")
    other.set("balance", 10)
    pipe.multi()
    pipe.set("balance", 99)
    try:
        pipe.execute()
        raise AssertionError("EXEC after a watched write ran")
    except redis.WatchError:
        pass
assert r.get("balance") == b"10"
print("ok")
