#!/usr/bin/env bash
# Builds memtier_benchmark (RedisLabs' load generator, the independent cross-check of every
# qs-bench figure) into a cache directory outside the repository. A benchmark tool only: tests
# and CI do not need it.
#
#   scripts/build-memtier.sh [SOURCE]
#
# SOURCE: a memtier_benchmark checkout or a git URL (default: the checkout already in the cache,
# else https://github.com/RedisLabs/memtier_benchmark). Installs Debian's build dependencies
# (autotools, libevent, libpcre3, zlib, OpenSSL headers) when they are missing. Prints the
# binary's path: pass it to scripts/bench-memtier.py --memtier (its default is that path).
set -euo pipefail
cache=${QS_MEMTIER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memtier}
src="$cache/src"
source=${1:-}
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

packages=(build-essential autoconf automake libtool pkg-config libevent-dev libpcre3-dev zlib1g-dev libssl-dev git)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]}" >&2
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}" >/dev/null
fi

mkdir -p "$cache"
if [ -n "$source" ] && [ -d "$source" ]; then
    if [ "$(cd "$source" && pwd)" != "$(cd "$src" 2>/dev/null && pwd || true)" ]; then
        rm -rf "$src"
        cp -r "$source" "$src"
    fi
elif [ ! -f "$src/configure.ac" ]; then
    rm -rf "$src"
    git clone -q "${source:-https://github.com/RedisLabs/memtier_benchmark}" "$src"
fi

cd "$src"
if [ ! -x memtier_benchmark ] || [ -n "$source" ]; then
    [ -f configure ] || autoreconf -ivf >/dev/null 2>&1
    [ -f Makefile ] || ./configure -q
    make -s -j"$(nproc)" >/dev/null
fi
echo "$src/memtier_benchmark (version: $("$src/memtier_benchmark" --version 2>&1 | head -n 1))"
