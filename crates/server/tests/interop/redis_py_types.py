#!/usr/bin/env python3
"""A session store, a tag index, a leaderboard and a rate limiter's window through redis-py's
own API (hashes, sets, sorted sets and lists), as applications use them. The same script runs
against redis-server and quicksilver (crates/server/tests/resp_types.rs), and prints what it
read, so the two runs can be compared whole.

    redis_py_types.py PORT
"""
import json
import sys

import redis

r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
r.flushdb()
seen = {}

# A session: a hash with an expiry, read whole and by field, a counter field, a field deleted.
session = "session:42"
r.hset(session, mapping={"user": "ada", "cart": "3", "csrf": "x9"})
r.expire(session, 1800)
r.hincrby(session, "cart", 2)
r.hdel(session, "csrf")
seen["session"] = {k.decode(): v.decode() for k, v in sorted(r.hgetall(session).items())}
seen["session_user"] = r.hget(session, "user").decode()
seen["session_ttl_set"] = r.ttl(session) > 0
seen["session_missing"] = r.hmget(session, ["user", "nope"])[1]

# Tags: sets of keys per tag, intersected and cleared.
pipe = r.pipeline(transaction=True)
pipe.sadd("tag:{shop}:red", "item:1", "item:2", "item:3")
pipe.sadd("tag:{shop}:sale", "item:2", "item:3", "item:4")
pipe.execute()
seen["both"] = sorted(m.decode() for m in r.sinter("tag:{shop}:red", "tag:{shop}:sale"))
seen["red_has_2"] = r.sismember("tag:{shop}:red", "item:2")
r.srem("tag:{shop}:red", "item:1", "item:2", "item:3")
seen["red_gone"] = r.exists("tag:{shop}:red")

# A leaderboard: a sorted set ranked, incremented, sliced by score.
r.zadd("board", {"ada": 10, "bob": 7, "cy": 12})
r.zincrby("board", 5, "bob")
seen["top"] = [(m.decode(), s) for m, s in r.zrevrange("board", 0, 1, withscores=True)]
seen["rank_bob"] = r.zrevrank("board", "bob")
seen["over_10"] = [m.decode() for m in r.zrangebyscore("board", "(10", "+inf")]

# A moving window (limits' shape): pushes trimmed to a length, its oldest read back.
for hit in range(5):
    r.lpush("window", f"t{hit}")
    r.ltrim("window", 0, 2)
seen["window"] = [m.decode() for m in r.lrange("window", 0, -1)]
seen["oldest"] = r.lindex("window", -1).decode()

# A wrong type is the client's error, and the connection stays usable.
try:
    r.lpush(session, "x")
    raise AssertionError("LPUSH on a hash succeeded")
except redis.ResponseError as error:
    seen["wrongtype"] = str(error).split()[0]
seen["type"] = [r.type(k).decode() for k in (session, "tag:{shop}:sale", "board", "window", "nokey")]
print(json.dumps(seen, sort_keys=True))
