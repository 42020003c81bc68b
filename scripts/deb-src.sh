#!/usr/bin/env bash
# Fetches a Debian source package into a directory of its own, once:
#
#     scripts/deb-src.sh PACKAGE DIRECTORY_PREFIX DESTINATION MARKER_FILE
#
# e.g. `scripts/deb-src.sh redis redis-7.0.15 ~/.cache/quicksilver/redis-7.0.15
# tests/test_helper.tcl`. Adds Debian's source archive (a deb-src entry of its own, signed as
# the system's deb entry) where apt has none, installs dpkg-dev where `dpkg-source` is missing,
# unpacks the package, and moves the directory whose name starts with DIRECTORY_PREFIX to
# DESTINATION; fails unless DESTINATION/MARKER_FILE is then there.
set -euo pipefail
package=$1 prefix=$2 destination=$3 marker=$4
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
ours=/etc/apt/sources.list.d/quicksilver-deb-src.sources
if [ -f "$ours" ] || ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    # apt refuses two entries for one archive whose Signed-By differ: take the deb entry's.
    signed=$(grep -hs -m1 '^Signed-By:' /etc/apt/sources.list.d/debian.sources || true)
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s %s-updates\nComponents: main\n%s\n' \
        "$codename" "$codename" "$signed" | $SUDO tee "$ours" >/dev/null
fi
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
if ! command -v dpkg-source >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q dpkg-dev >/dev/null
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && apt-get source -q "$package" >/dev/null 2>&1)
found=$(find "$scratch" -maxdepth 1 -type d -name "$prefix*" | head -n 1)
if [ -z "$found" ] || [ ! -f "$found/$marker" ]; then
    echo "$prefix was not found in Debian's source package $package:" >&2
    ls "$scratch" >&2
    exit 1
fi
mkdir -p "$(dirname "$destination")"
rm -rf "$destination"
mv "$found" "$destination"
