#!/bin/bash
# Builds memcached 1.6.45 with its built-in proxy (--enable-proxy: Lua and routelib, vendored in
# ../shared/memcached-1.6.45's source tarball, so no network) in the cache directory, once, and
# prints the binary's path. The proxy tests (crates/server/tests/proxy.rs) run it in front of
# quicksilver and memcached backends; scripts/test.sh exports the path as QS_MEMCACHED_PROXY.
#
#     scripts/build-memcached-proxy.sh      (needs autoconf, automake, libevent-dev, libssl-dev)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/quicksilver/proxy
src=$cache/memcached-1.6.45
if [ ! -x "$src/memcached" ]; then
    mkdir -p "$cache"
    tar -xzf "$REPO/../shared/memcached-1.6.45/memcached-1.6.45-with-vendor.tar.gz" -C "$cache"
    (cd "$src" && ./autogen.sh && ./configure --enable-proxy --enable-tls && make -j2) \
        >"$cache/build.log" 2>&1 || { tail -n 40 "$cache/build.log" >&2; exit 1; }
fi
echo "$src/memcached"
