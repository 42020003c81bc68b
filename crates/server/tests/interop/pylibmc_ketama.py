#!/usr/bin/env python3
"""libmemcached's ketama through pylibmc: stores or reads keys on a fleet of servers.

Usage: pylibmc_ketama.py ketama|ketama_md5|ketama_weighted set|get PREFIX COUNT HOST:PORT...
  set: stores PREFIX:i = value:i for i < COUNT through libmemcached's placement.
  get: reads them back; exits 1 naming the first key that is missing or wrong.
"""
import sys

import pylibmc


def main():
    flavor, action, prefix, count, servers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    behaviors = {
        "ketama": {"ketama": True},
        "ketama_md5": {"ketama": True, "hash": "md5"},
        "ketama_weighted": {"ketama_weighted": True},
    }[flavor]
    client = pylibmc.Client(servers, behaviors=behaviors)
    keys = [f"{prefix}:{i}" for i in range(count)]
    if action == "set":
        for i, key in enumerate(keys):
            if not client.set(key, f"value:{i}".encode()):
                sys.exit(f"set {key} failed")
        return
    for i, key in enumerate(keys):
        got = client.get(key)
        if got != f"value:{i}".encode():
            sys.exit(f"get {key}: {got!r}")


if __name__ == "__main__":
    main()
