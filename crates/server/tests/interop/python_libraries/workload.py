"""What Python cache and rate-limit libraries send, through their own APIs, against a Redis
listener (crates/server/tests/resp_libraries.rs runs it against redis-server and quicksilver):

- Django's built-in RedisCache (django.core.cache.backends.redis): set_many (a MULTI/EXEC
  pipeline), get_many, delete_many, incr, add, touch, get_or_set, on database 1 as a Django
  site given redis://host:port/1 uses it;
- django-redis: set_many, incr (its Lua script), lock (redis-py's Lock), on database 2;
- limits (Flask-Limiter's and slowapi's storage): the fixed-window and sliding-window-counter
  strategies (their Lua scripts over INCRBY, EXPIRE, GET, TTL).

    python3 workload.py PORT

Exits non-zero at the first difference from what the libraries promise.
"""
import sys
import time

import django
from django.conf import settings

port = int(sys.argv[1])
base = f"redis://127.0.0.1:{port}"
settings.configure(
    CACHES={
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": base + "/1"},
        "django_redis": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": base + "/2",
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        },
    },
    USE_TZ=True,
)
django.setup()

from django.core.cache import caches  # noqa: E402
import redis  # noqa: E402

raw = redis.Redis.from_url(base)
raw.flushall()


def django_builtin():
    cache = caches["default"]
    assert cache.set_many({"a": 1, "b": "two", "c": [3]}, timeout=60) == []
    assert cache.get_many(["a", "b", "c", "missing"]) == {"a": 1, "b": "two", "c": [3]}
    assert cache.incr("a") == 2
    assert cache.incr("a", 10) == 12
    assert cache.add("a", 99) is False
    assert cache.add("fresh", "new", timeout=30) is True
    assert cache.touch("fresh", timeout=300) is True
    assert cache.touch("missing") is False
    assert cache.get_or_set("computed", lambda: "made", timeout=60) == "made"
    cache.delete_many(["b", "c"])
    assert cache.get_many(["a", "b", "c"]) == {"a": 12}
    assert cache.has_key("fresh")
    # Django's own cache tests store keys past memcached's 250 bytes on Redis.
    long_key = "report:" + "x" * 400
    cache.set(long_key, "long", timeout=60)
    assert cache.get(long_key) == "long"
    # Database 1 holds them; database 0 does not.
    assert redis.Redis.from_url(base + "/1").dbsize() > 0
    assert raw.dbsize() == 0
    cache.clear()  # FLUSHDB of database 1 alone
    assert cache.get("a") is None


def django_redis():
    cache = caches["django_redis"]
    cache.set_many({"x": 1, "y": 2}, timeout=60)
    assert cache.get_many(["x", "y"]) == {"x": 1, "y": 2}
    assert cache.incr("x", 5) == 6
    assert cache.ttl("x") > 0
    with cache.lock("resource", timeout=10):
        assert not cache.lock("resource", timeout=10).acquire(blocking=False)
    assert cache.lock("resource", timeout=10).acquire(blocking=False)
    assert sorted(cache.keys("*")) == ["resource", "x", "y"]
    cache.delete_pattern("x*")
    assert cache.get("x") is None


def limits_strategies():
    from limits import parse, storage, strategies

    store = storage.storage_from_string(base)
    assert store.check()
    for strategy in (strategies.FixedWindowRateLimiter, strategies.SlidingWindowCounterRateLimiter):
        limiter = strategy(store)
        limit = parse("5/minute")
        key = strategy.__name__
        allowed = [limiter.hit(limit, key) for _ in range(7)]
        assert allowed == [True] * 5 + [False] * 2, (strategy.__name__, allowed)
        stats = limiter.get_window_stats(limit, key)
        assert stats.remaining == 0 and stats.reset_time > time.time() - 1, stats
        limiter.clear(limit, key)
        assert limiter.hit(limit, key)
    store.reset()


django_builtin()
django_redis()
limits_strategies()
print("python libraries: ok")
