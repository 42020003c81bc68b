#!/usr/bin/env bash
# Quicksilver's test command (the README's): formatting, lints, every test (the hostile-client
# suite among them), memcached's own t/ suite, Redis's own tests/, docs, and the engine's
# concurrency checks (Miri on the unsafe parts, loom on the CREW read/write protocol), and a short
# fuzzing run of the protocol parsers.
# Installs what it needs itself. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain components"
if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

step "system packages: memcached (the oracle), libmemcached-tools, twemproxy, pymemcache (and pytest for its suite), pylibmc, python-binary-memcached, openssl, Perl's IO::Socket::SSL, redis-server, redis-cli and redis-py, Go, Node.js, Java and Maven for the Redis clients, Prometheus and PyYAML for the metrics, valgrind for the instruction budget, and for the package and the guides dpkg-dev, man-db, strace, netcat-openbsd, systemd"
missing=()
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
command -v memccapable >/dev/null 2>&1 || missing+=(libmemcached-tools)
command -v nutcracker >/dev/null 2>&1 || missing+=(nutcracker)
/usr/bin/python3 -c "import pymemcache" >/dev/null 2>&1 || missing+=(python3-pymemcache)
/usr/bin/python3 -c "import pylibmc" >/dev/null 2>&1 || missing+=(python3-pylibmc)
/usr/bin/python3 -c "import bmemcached" >/dev/null 2>&1 || missing+=(python3-binary-memcached)
/usr/bin/python3 -c "import pytest" >/dev/null 2>&1 || missing+=(python3-pytest)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
perl -MIO::Socket::SSL -e 1 >/dev/null 2>&1 || missing+=(libio-socket-ssl-perl)
# The package's build and tests: dpkg-shlibdeps, man, strace.
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v strace >/dev/null 2>&1 || missing+=(strace)
# The guides' commands (docs/OPERATIONS.md) talk to the server with nc.
command -v nc >/dev/null 2>&1 || missing+=(netcat-openbsd)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# The Redis protocol's oracle and its command-line client.
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
/usr/bin/python3 -c "import redis" >/dev/null 2>&1 || missing+=(python3-redis)
# Redis clients in other languages (crates/server/tests/resp.rs): go-redis with the machine's Go
# (its module from the Go module proxy), ioredis with Node.js (from the npm registry), Jedis with
# Java and Maven (from Maven Central); Debian's packages where the machine has none.
command -v go >/dev/null 2>&1 || missing+=(golang-go)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v java >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# The metrics endpoint's judges (scripts/test-metrics.py): Prometheus and promtool, and PyYAML
# for the Kubernetes example.
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
/usr/bin/python3 -c "import yaml" >/dev/null 2>&1 || missing+=(python3-yaml)
# memcached 1.6.45's proxy, built from ../shared's source (scripts/build-memcached-proxy.sh).
command -v autoreconf >/dev/null 2>&1 || missing+=(autoconf)
command -v automake >/dev/null 2>&1 || missing+=(automake)
[ -f /usr/include/event2/event.h ] || missing+=(libevent-dev)
[ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
# A virtual environment for PyPI's cluster-discovery client (crates/server/tests/discovery.rs).
/usr/bin/python3 -c "import ensurepip" >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    # Another apt-get or unattended-upgrades may hold the dpkg lock: wait for it (10 min)
    # rather than fail at once.
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}" >/dev/null
    # Debian starts the services it installs where it can; tests start their own on free ports.
    $SUDO service memcached stop >/dev/null 2>&1 || true
    $SUDO service nutcracker stop >/dev/null 2>&1 || true
    $SUDO service redis-server stop >/dev/null 2>&1 || true
    $SUDO service prometheus stop >/dev/null 2>&1 || true
    $SUDO service prometheus-node-exporter stop >/dev/null 2>&1 || true
fi
# systemd-analyze checks the package's unit where the systemd package is installable.
if ! command -v systemd-analyze >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q systemd >/dev/null 2>&1 || true
fi

step "PyPI: elasticache-pyclient (ElastiCache's cluster discovery) in a virtual environment of the cache"
venv=${XDG_CACHE_HOME:-$HOME/.cache}/quicksilver/venv-discovery
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -c "import elasticache_pyclient" >/dev/null 2>&1 ||
    "$venv/bin/pip" install -q elasticache-pyclient==2.1.2 python-memcached==1.62 uhashring==2.5

step "memcached 1.6.45's built-in proxy (routelib), built once in the cache for crates/server/tests/proxy.rs"
QS_MEMCACHED_PROXY=$(bash scripts/build-memcached-proxy.sh)
export QS_MEMCACHED_PROXY

echo "QS_MEMCACHED_PROXY=$QS_MEMCACHED_PROXY" > /tmp/proxy.env
