"""Scripts through redis-py (Debian's python3-redis) against a RESP listener, as the libraries on
top of it use them: `Lock` (acquire with SET NX PX; release, extend and reacquire are Lua
scripts sent with EVALSHA, falling back to EVAL on NOSCRIPT), contended by several threads
that each add to a counter under the lock (the total must be exact); `register_script` with
keys and arguments; SCRIPT LOAD / EXISTS / FLUSH; a script's error raised as ResponseError.
Exits non-zero on the first mismatch; run against redis-server and quicksilver alike."""
import sys
import threading

import redis
from redis.exceptions import LockError, LockNotOwnedError, NoScriptError, ResponseError

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
r.flushall()
r.script_flush()

# A lock: acquired, extended, released; a second holder waits; a stolen lock cannot be released.
lock = r.lock("resource", timeout=5)
assert lock.acquire(blocking=False)
assert not r.lock("resource", timeout=5).acquire(blocking=False)
assert lock.extend(10)
assert 5000 < r.pttl("resource") <= 15000, r.pttl("resource")
assert lock.reacquire()
lock.release()
assert r.get("resource") is None
stolen = r.lock("resource", timeout=5)
assert stolen.acquire(blocking=False)
r.set("resource", "someone else")
try:
    stolen.release()
    raise AssertionError("releasing a lock another holds raised nothing")
except LockNotOwnedError:
    pass
r.delete("resource")

# Contended: each thread adds under the lock; the sum is exact.
r.set("counter", 0)


def work():
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    for _ in range(25):
        with client.lock("counted", timeout=10, blocking_timeout=30, sleep=0.001):
            value = int(client.get("counter"))
            client.set("counter", value + 1)


threads = [threading.Thread(target=work) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert int(r.get("counter")) == 100, r.get("counter")

# register_script: EVALSHA, and EVAL once the cache is flushed.
limited = r.register_script(
    "local n = redis.call('incr', KEYS[1]) "
    "if n == 1 then redis.call('pexpire', KEYS[1], ARGV[1]) end "
    "return {n, redis.call('pttl', KEYS[1])}"
)
first = limited(keys=["rate:user"], args=[60000])
assert first[0] == 1 and 0 < first[1] <= 60000, first
assert limited(keys=["rate:user"], args=[60000])[0] == 2
r.script_flush()
assert limited(keys=["rate:user"], args=[60000])[0] == 3
sha = r.script_load("return ARGV[1] .. KEYS[1]")
assert r.script_exists(sha, "0" * 40) == [True, False]
assert r.evalsha(sha, 1, "k", "v") == b"vk"
r.script_flush()
try:
    r.evalsha(sha, 1, "k", "v")
    raise AssertionError("EVALSHA after SCRIPT FLUSH raised nothing")
except NoScriptError:
    pass
try:
    r.eval("return redis.call('incr', KEYS[1])", 1, "rate:text") if r.set("rate:text", "x") else None
    raise AssertionError("INCR of text inside a script raised nothing")
except ResponseError as error:
    assert "not an integer" in str(error), error
print("redis-py scripts: ok")
