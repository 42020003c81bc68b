#!/usr/bin/env bash
# Adds Debian's source archive (a deb-src entry of its own, signed as the system's deb entry)
# where apt has none, and updates apt's lists: `apt-get source` needs it.
set -euo pipefail
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
$SUDO apt-get update -q >/dev/null
