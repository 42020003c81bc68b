#!/usr/bin/env bash
# Runs Redis's own test suite (tests/ of Redis 7.0.15, the release Debian 12 ships, fetched once
# with a deb-src line and `apt-get source redis` into a cache directory outside the repository)
# against quicksilver's RESP listener, in the harness's external-server mode:
#
#   ./runtest --host H --port P --single unit/... --tags "-needs:debug -needs:repl -needs:save"
#
# Without --singledb: the harness selects database 9 (and 10 where a test moves keys), as it
# does against redis-server.
#
# The unit files of what a cache serves are run one after another against one quicksilver each.
# Tests of what quicksilver does not serve are skipped by name, each with its reason, in
# scripts/redis/skip.txt; every other test of those files must pass. Prints each file's counts
# and the total, and exits non-zero when a test fails or a file stops with an exception.
#
#   scripts/redis-tests.sh               the files below
#   scripts/redis-tests.sh unit/expire   only these
#
# QS_BIN: the server binary (default target/release/quicksilver, built if missing).
# QS_IO_BACKEND=epoll (or uring): that backend of quicksilver.
# QS_CACHE: where the source is kept (default ~/.cache/quicksilver).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
step() { printf '\n==> %s\n' "$*"; }
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

# Values up to 8 MiB (the suite sets 4 MB ones; redis-server's own limit is 512 MB).
server_args=(-U 0 -m 1024 -I 8m)
files=(unit/type/string unit/type/incr unit/type/hash unit/type/list unit/type/set unit/type/zset unit/expire unit/keyspace unit/protocol unit/quit unit/info-command unit/multi
    unit/scripting-eval unit/other)
[ $# -gt 0 ] && files=("$@")

cache=${QS_CACHE:-$HOME/.cache/quicksilver}
src="$cache/redis-7.0.15"
if [ ! -f "$src/tests/test_helper.tcl" ]; then
    step "fetching Redis 7.0.15's source (Debian source package) into $cache"
    bash scripts/deb-src.sh redis redis-7.0.15 "$src" tests/test_helper.tcl
fi
# unit/scripting runs its tests twice, through FUNCTION (not served) and through EVAL: its EVAL
# half, as a file of its own.
sed 's/^foreach is_eval {0 1} {/foreach is_eval {1} {/' "$src/tests/unit/scripting.tcl" >"$src/tests/unit/scripting-eval.tcl"
if ! command -v tclsh >/dev/null 2>&1; then
    step "installing tcl (the suite's harness)"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q tcl >/dev/null
fi

QS_BIN=${QS_BIN:-$repo/target/release/quicksilver}
if [ ! -x "$QS_BIN" ]; then
    step "building quicksilver (release)"
    cargo build --release --quiet -p qs-server
fi
[ -n "${QS_IO_BACKEND:-}" ] && server_args+=(-o "io_backend=$QS_IO_BACKEND")

run=$(mktemp -d)
pid=""
trap 'rm -rf "$run"; if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi' EXIT
# The skip list without its comments: one test name per line, as the harness reads --skipfile.
grep -v -e '^#' -e '^[[:space:]]*$' scripts/redis/skip.txt >"$run/skip" || true

total_ok=0
total_failed=0
total_skipped=0
broken=()
for file in "${files[@]}"; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$QS_BIN" "${server_args[@]}" -p 0 -l "proto[resp]:127.0.0.1:$port" >"$run/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break
        sleep 0.05
    done
    log="$run/$(basename "$file").log"
    status=0
    (cd "$src" && timeout 900 ./runtest --host 127.0.0.1 --port "$port" --single "$file" \
        --tags "-needs:debug -needs:repl -needs:save" --skipfile "$run/skip" --clients 1 >"$log" 2>&1) || status=$?
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
    ok=$(grep -c '\[ok\]' <(sed 's/\x1b\[[0-9;]*m//g' "$log") || true)
    failed=$(grep -c '\[err\]' <(sed 's/\x1b\[[0-9;]*m//g' "$log") || true)
    skipped=$(grep -c '\[ignore\]\|\[skip\]' <(sed 's/\x1b\[[0-9;]*m//g' "$log") || true)
    exception=$(grep -c '\[exception\]' <(sed 's/\x1b\[[0-9;]*m//g' "$log") || true)
    printf '%-22s %3d passed, %3d failed, %3d skipped%s\n' "$file" "$ok" "$failed" "$skipped" \
        "$([ "$exception" -gt 0 ] && echo ', stopped by an exception')"
    total_ok=$((total_ok + ok))
    total_failed=$((total_failed + failed))
    total_skipped=$((total_skipped + skipped))
    if [ "$status" -ne 0 ] || [ "$failed" -gt 0 ] || [ "$exception" -gt 0 ]; then
        broken+=("$file")
        sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E -A12 '^\[(err|exception)\]' | head -n 80
    fi
done
printf 'Redis 7.0.15 tests: %d passed, %d failed, %d skipped (by tag or by name in scripts/redis/skip.txt)\n' \
    "$total_ok" "$total_failed" "$total_skipped"
if [ "${#broken[@]}" -gt 0 ]; then
    echo "failing: ${broken[*]}"
    exit 1
fi
