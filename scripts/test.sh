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

step "system packages: memcached (the oracle), libmemcached-tools, twemproxy, pymemcache (and pytest for its suite), pylibmc, python-binary-memcached, openssl, Perl's IO::Socket::SSL, redis-server, redis-cli and redis-py, Go, Node.js, Java and Maven for the Redis clients, PHP with phpredis (Laravel's store), Prometheus and PyYAML for the metrics, valgrind for the instruction budget, and for the package and the guides dpkg-dev, man-db, strace, netcat-openbsd, systemd"
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
# Laravel's Redis cache store through phpredis (crates/server/tests/resp_libraries.rs).
command -v php >/dev/null 2>&1 || missing+=(php-cli)
php -r 'exit(extension_loaded("redis") ? 0 : 1);' >/dev/null 2>&1 || missing+=(php-redis)
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

step "cargo fmt --check"
cargo fmt --all -- --check

step "layout: no import cycle between a crate's components; outside bench no file over 1,000 lines and no long-function allow; no clock read in proto or store; unsafe only in the files the script lists (the script's own tests first)"
python3 -m unittest -q scripts/test_check_layout.py
python3 scripts/check-layout.py

step "cargo clippy (all targets, warnings are errors; clippy::too_many_lines at 100)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test"
cargo test --workspace --quiet 2>&1 | tee /tmp/qs-test-output.txt
test "${PIPESTATUS[0]}" -eq 0

step "the epoll backend (-o io_backend=epoll; io_uring is the default): the end-to-end, hostile-client, TLS, interop, binary, UDP, Redis transaction, script and database suites again"
QS_IO_BACKEND=epoll cargo test -p qs-server --quiet --test e2e --test hostile --test tls --test interop \
    --test binary --test udp --test budget --test resp_tx --test resp_scripts --test resp_db --test resp_types 2>&1 | tail -n 40

step "memcached 1.6.45's own t/ suite against quicksilver (its wire-protocol files, each starting its server)"
cargo build --release --quiet -p qs-server
QS_BIN="$PWD/target/release/quicksilver" bash scripts/memcached-t.sh

step "memcached 1.6.45's t/ suite in daemon mode (T_MEMD_USE_DAEMON: a running server per file)"
QS_T_DAEMON=1 QS_BIN="$PWD/target/release/quicksilver" bash scripts/memcached-t.sh

step "memcached 1.6.45's t/ suite again, every file over TLS (-Z)"
QS_T_TLS=1 QS_BIN="$PWD/target/release/quicksilver" bash scripts/memcached-t.sh

step "memcached 1.6.45's t/ suite again, every file on the epoll backend"
QS_IO_BACKEND=epoll QS_BIN="$PWD/target/release/quicksilver" bash scripts/memcached-t.sh

step "Redis 7.0.15's own tests/ (its string, counter, expiry, keyspace, protocol, quit and INFO files) against quicksilver's RESP listener, on both I/O backends"
QS_BIN="$PWD/target/release/quicksilver" bash scripts/redis-tests.sh
QS_IO_BACKEND=epoll QS_BIN="$PWD/target/release/quicksilver" bash scripts/redis-tests.sh

step "stress: random command streams of both dialects (values up to the item limit, -m 8, -t 1 and -t 2) with a fixed seed and a random one: every request answered, no panic, every acknowledged write's next read answers it (scripts/stress.py)"
/usr/bin/python3 scripts/stress.py --seed 74 --seconds "${QS_STRESS_SECONDS:=15}"
/usr/bin/python3 scripts/stress.py --seconds "$QS_STRESS_SECONDS"

step "instructions per request under callgrind (text, RESP and binary at depth 16 and 1, 16 KiB values, sets handed to their owner) within docs/benchmarks/instructions.json's budgets (scripts/instructions.py --check)"
/usr/bin/python3 scripts/instructions.py --check

step "the metrics endpoint's judges: memcached_exporter (built from its Go module) against memcached 1.6.18 and quicksilver, promtool, a real Prometheus, 10,000 connections, the Kubernetes example"
/usr/bin/python3 scripts/test-metrics.py

step "a replicated pair behind memcached's proxy losing a backend under load (kill -9, then a warm restart): no read lost, sets fail only while it is down (memtier through the proxy too where it is built)"
PHASE_SECS=6 python3 scripts/bench-proxy-fault.py --check

step "the Debian package: built with cargo-deb, its contents and unit checked, unpacked, started from its config and from Debian's memcached.conf"
bash scripts/package.sh
python3 scripts/test-package.py target/debian/quicksilver_*.deb

step "the guides' commands (docs/OPERATIONS.md) against real servers, and its troubleshooting table's messages provoked"
cargo build --release --quiet -p qs-bench
python3 scripts/test-guides.py

step "cargo doc (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" \
    cargo doc --workspace --no-deps --quiet

step "loom model of the CREW read/write protocol"
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p qs-store --release --quiet --test loom_crew --target-dir target/loom

step "loom model of the lending desk (a step over several workers' partitions: no deadlock, nothing lost)"
RUSTFLAGS="--cfg lending_loom" LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p qs-server --release --quiet --lib loom_model --target-dir target/loom

step "Miri on the engine's unsafe and shared-memory code"
if command -v rustup >/dev/null 2>&1 && \
   rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1; then
    MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-disable-isolation" PROPTEST_CASES=2 \
        cargo +nightly miri test -p qs-store -p qs-proto --lib --quiet -- miri_
else
    echo "SKIPPED: Miri is not installable on this machine (nightly toolchain unavailable)"
fi

step "fuzz the parsers (text, meta, binary, native, UDP framing, RESP), the auth gates, the config parsers and whole sessions against in-process servers (cargo-fuzz, ${QS_FUZZ_SECONDS:=30} s each)"
if command -v rustup >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
    for target in text meta binary native udp resp auth config session; do
        # New inputs go to a scratch directory; the committed seeds stay as they are.
        scratch=$(mktemp -d)
        status=0
        cargo +nightly fuzz run "$target" "$scratch" "fuzz/corpus/$target" -- \
            -max_total_time="$QS_FUZZ_SECONDS" -max_len=4096 >"$scratch.log" 2>&1 || status=$?
        grep -E "^Done|panicked|SUMMARY" "$scratch.log" || true
        if [ "$status" -ne 0 ]; then
            tail -n 60 "$scratch.log"
            echo "fuzz target $target failed; the input is in fuzz/artifacts/$target/"
            exit 1
        fi
        rm -rf "$scratch" "$scratch.log"
    done
else
    echo "SKIPPED: cargo-fuzz needs a nightly toolchain, which this machine lacks"
fi

step "all checks passed"
