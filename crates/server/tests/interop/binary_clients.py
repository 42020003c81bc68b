"""Real binary-protocol clients against one server: pylibmc (libmemcached) with binary=True, and
python-binary-memcached (bmemcached), optionally with SASL. Prints a transcript, one line per
call (its result, or the exception's type), so that the test can compare the transcript
quicksilver produces with memcached's; a few results are also checked here.

    binary_clients.py pylibmc HOST:PORT
    binary_clients.py bmemcached HOST:PORT [USER PASSWORD]
"""
import sys

transcript = []


def call(name, function, *args, **kwargs):
    try:
        result = function(*args, **kwargs)
    except Exception as error:  # the client's way of saying no is part of the transcript
        result = "raised " + type(error).__name__
    if name.startswith("gets") and isinstance(result, tuple):
        result = (result[0], "<cas>" if result[1] else result[1])
    transcript.append("%s -> %r" % (name, result))
    return result


def pylibmc_session(server):
    import pylibmc

    c = pylibmc.Client([server], binary=True, behaviors={"cas": True})
    call("flush_all", c.flush_all)
    assert call("set k", c.set, "k", "v", time=100)
    assert call("get k", c.get, "k") == "v"
    call("get missing", c.get, "missing")
    call("add k", c.add, "k", "x")
    call("add new", c.add, "new", "n")
    call("replace new", c.replace, "new", "n2")
    call("replace absent", c.replace, "absent", "x")
    call("append k", c.append, "k", "++")
    call("prepend k", c.prepend, "k", "--")
    assert call("get k", c.get, "k") == "--v++"
    call("append absent", c.append, "absent", "x")
    call("set_multi", c.set_multi, {"a": "1", "b": "2", "c": "3"})
    assert call("get_multi", c.get_multi, ["a", "b", "c", "zz"]) == {"a": "1", "b": "2", "c": "3"}
    call("incr a", c.incr, "a", 10)
    call("decr a", c.decr, "a", 20)
    call("incr absent", c.incr, "absent", 1)
    call("incr k (text)", c.incr, "k", 1)
    value, cas = c.gets("b")
    call("cas b", c.cas, "b", "22", cas)
    call("cas b stale", c.cas, "b", "23", cas)
    call("get b", c.get, "b")
    call("delete c", c.delete, "c")
    call("delete c again", c.delete, "c")
    call("touch b", c.touch, "b", 100)
    call("touch absent", c.touch, "absent", 100)
    call("delete_multi", c.delete_multi, ["a", "b"])
    big = "x" * 500000
    call("set big", c.set, "big", big)
    assert c.get("big") == big
    call("set too big", c.set, "huge", "y" * (2 << 20))
    call("set obj", c.set, "obj", {"python": ["object", 1]})
    call("get obj", c.get, "obj")
    call("set 1000 keys", c.set_multi, dict(("key%d" % i, "value%d" % i) for i in range(1000)))
    got = c.get_multi(["key%d" % i for i in range(1000)])
    call("get 1000 keys", lambda: len(got) == 1000 and got["key999"] == "value999")
    stats = c.get_stats()
    assert stats and int(stats[0][1]["cmd_get"]) > 0, stats


def bmemcached_session(server, user=None, password=None):
    import bmemcached

    c = bmemcached.Client([server], user, password)
    assert call("set k", c.set, "k", "v")
    assert call("get k", c.get, "k") == "v"
    call("get missing", c.get, "missing")
    call("add k", c.add, "k", "x")
    call("replace k", c.replace, "k", "w")
    call("replace absent", c.replace, "absent", "w")
    call("set_multi", c.set_multi, {"a": "1", "b": "2"})
    call("get_multi", c.get_multi, ["a", "b", "zz"])
    call("set n", c.set, "n", 5)
    call("incr n", c.incr, "n", 3)
    call("decr n", c.decr, "n", 10)
    call("gets a", c.gets, "a")
    value, cas = c.gets("a")
    call("cas a", c.cas, "a", "11", cas)
    call("cas a stale", c.cas, "a", "12", cas)
    call("delete a", c.delete, "a")
    call("get a", c.get, "a")
    call("set obj", c.set, "obj", [1, 2, {"three": 3}])
    call("get obj", c.get, "obj")
    stats = c.stats()
    assert any("cmd_get" in figures for figures in stats.values()), stats
    call("flush_all", c.flush_all)
    call("get b", c.get, "b")


if __name__ == "__main__":
    kind, server = sys.argv[1], sys.argv[2]
    if kind == "pylibmc":
        pylibmc_session(server)
    else:
        bmemcached_session(server, *sys.argv[3:5])
    print("\n".join(transcript))
