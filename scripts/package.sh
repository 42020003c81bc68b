#!/usr/bin/env bash
# Builds the Debian package, target/debian/quicksilver_<version>_<arch>.deb, with cargo-deb
# (installed into ~/.cargo/bin when missing): the release binary, the man page generated from
# the command line (crates/server/examples/manpage.rs), /etc/quicksilver.conf and the systemd
# unit (crates/server/debian/). Install it with `apt install ./target/debian/quicksilver_*.deb`.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --quiet --no-default-features
cargo build --release --quiet -p qs-server
cargo run --release --quiet -p qs-server --example manpage | gzip -9n > target/release/quicksilver.1.gz
rm -f target/debian/quicksilver_*.deb
# Stripped: the release profile keeps line tables for profiling, which a package need not carry.
cargo deb --no-build --quiet --strip -p qs-server --output target/debian/
