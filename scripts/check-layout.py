#!/usr/bin/env python3
"""Layout rules the compiler does not check, run by scripts/test.sh.

1. No import cycle between a crate's components. A component is a top-level module of the
   crate (a file beside lib.rs/main.rs, or a folder with its mod.rs); the files inside one
   folder are one component, as the files of one crate are (Cargo, too, allows cycles inside a
   crate and refuses them between crates). The crate root (lib.rs, main.rs) is the crate's
   face, not a component: it declares the components and re-exports what the crate offers.
   An edge A -> B is any path in A's files that names B: `crate::B...` (or B in a
   `crate::{...}` group), or `super::B...` from a file beside the root.
2. No source file over 1,000 lines in any crate but bench.
3. No `#[allow(clippy::too_many_lines)]` in any crate's src but bench's: clippy's limit of 100
   lines a function holds everywhere else.
4. One router and one executor in the server: no function named `route_<dialect>` (text,
   meta, binary, resp, ...) comes back beside `Engine::route`, which routes every dialect's
   requests by their `Reach` (crates/server/src/exec/route.rs); and no executor of one
   dialect (`meta_get`, `binary_store`, `resp_set`, `execute_binary`, ...) beside
   `Engine::run_command`, which runs every dialect's command on a key
   (`qs_proto::command::Command`, crates/server/src/exec/run.rs).
5. The server's components are `pub(crate)` in its lib.rs but the ones other crates name
   (SERVER_PUBLIC_MODULES: its binary, the fuzz targets, the integration tests).

Each rule's known debts are listed below (DEBTS) with the issue that pays them; a file listed
there that no longer breaks its rule must leave the list.

Prints every cycle (as component -> component -> ...), every long file and every allow; exits 1
if any.

    scripts/check-layout.py [REPO]
"""
import os
import re
import sys

FILE_LINES_MAX = 1000
# Crates whose files and functions may be long (the benchmarks' drivers and reports).
EXEMPT_CRATES = ("bench",)
ALLOW_LONG = "allow(clippy::too_many_lines)"
# What still breaks a rule, by path, with the issue that pays it (none now); the check fails
# once one is paid but still listed.
DEBTS = {}

ident = r"[A-Za-z_][A-Za-z0-9_]*"
# A router of one dialect (rule 4): `route_keys` is the one router's rule for a text get's keys.
DIALECT_ROUTER = re.compile(r"\bfn\s+route_(text|meta|binary|bin|ascii|resp|redis|native|udp|get)\b")
# An executor of one dialect (rule 4): a keyed operation named for its dialect.
# The only files of each crate with `unsafe` code (each block small, behind a safe API, with a
# SAFETY comment: clippy's undocumented_unsafe_blocks is denied). A crate not named has none.
# A new file with `unsafe` joins this list deliberately, in review; one that no longer has any
# leaves it.
UNSAFE_FILES = {
    "bench": ("src/probe.rs",),
    "net": ("src/lib.rs", "src/uring.rs"),
    "proto": ("src/out.rs",),
    "server": (
        "src/flashio.rs",
        "src/net/ring.rs",
        "src/observe/clients.rs",
        "src/script/call.rs",
        "src/script/convert.rs",
        "src/script/current.rs",
        "src/script/door.rs",
        "src/script/run.rs",
        "src/sys/daemon.rs",
        "src/sys/mod.rs",
        "src/worker/flash.rs",
    ),
    "store": ("src/flash.rs", "src/log.rs", "src/partition/pins.rs", "src/region.rs"),
}
UNSAFE = re.compile(r"\bunsafe\b")
# The crates that read no clock: time comes in (the store's `now`, the codecs' `Limits::now_ms`).
CLOCKLESS_CRATES = ("proto", "store")
CLOCK = re.compile(r"\b(?:SystemTime|Instant)::now\b|\bclock::now\b")
DIALECTS = r"(?:text|meta|binary|bin|ascii|resp|redis)"
# An executor outside the executor's folder (rule 4): whatever runs a request is in exec/.
EXECUTE_FN = re.compile(r"\bfn\s+execute\b")
EXECUTOR_FOLDER = "crates/server/src/exec/"
# The server's components other crates may name (rule 5): what its binary, the fuzz targets and
# the integration tests use. Every other one is `pub(crate) mod` in lib.rs, so its items are
# the crate's own and the compiler reports the ones nothing uses.
SERVER_PUBLIC_MODULES = ("config", "observe", "server", "session", "sys")
PUBLIC_MOD = re.compile(r"^pub mod (" + ident + r");", re.M)
DIALECT_EXECUTOR = re.compile(
    rf"\bfn\s+({DIALECTS}_(?:get|gets|set|store|delete|arith|incr|decr|touch|debug|fetch|read|write)"
    rf"|(?:execute|exec|run)_{DIALECTS})\b"
)


CHAR_LITERAL = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]{1,6}\}|.)|[^'\\\n])'")
RAW_STRING = re.compile(r'b?r(#*)"')


def strip(text):
    """The text without comments, string literals and char literals (paths inside them are not
    imports), read left to right as the compiler reads it: a raw string starts only where a
    token may (`"\\r{:100}\\r"` is one plain string, not the start of a raw one)."""
    out, i, n = [], 0, len(text)
    while i < n:
        char = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif char in "br\"" and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            raw = RAW_STRING.match(text, i)
            if raw:
                close = text.find('"' + raw.group(1), raw.end())
                i = n if close < 0 else close + 1 + len(raw.group(1))
                out.append('""')
            elif text.startswith('"', i) or text.startswith('b"', i):
                i = text.index('"', i) + 1
                while i < n and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
                out.append('""')
            else:
                out.append(char)
                i += 1
        elif char == "'":
            literal = CHAR_LITERAL.match(text, i)
            if literal:
                out.append("' '")
                i = literal.end()
            else:
                # A lifetime or a label.
                out.append(char)
                i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def components(src):
    """Maps each .rs file under src to its component (None for the crate root)."""
    found = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            parts = rel.split(os.sep)
            if len(parts) == 1 and name in ("lib.rs", "main.rs"):
                found[path] = None
            elif len(parts) == 1:
                found[path] = name[:-3]
            elif parts[0] == "bin":
                found[path] = None
            else:
                found[path] = parts[0]
    return found


def group_names(body):
    """The first names of a `{a, b::c, d::{e}}` use group's top-level entries."""
    names, depth, current = [], 0, ""
    for char in body:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if depth == 0 and char == ",":
            names.append(current)
            current = ""
        else:
            current += char
    names.append(current)
    out = []
    for name in names:
        match = re.match(r"\s*(" + ident + ")", name)
        if match:
            out.append(match.group(1))
    return out


def edges_of(path, component, known):
    with open(path, encoding="utf-8") as source:
        text = strip(source.read())
    targets = set()
    for match in re.finditer(r"\bcrate::(\{[^;]*?\}|" + ident + ")", text):
        token = match.group(1)
        names = group_names(token[1:-1]) if token.startswith("{") else [token]
        targets.update(name for name in names if name in known)
    # super:: from a file directly under the root names the root's children.
    if component is not None and os.path.basename(os.path.dirname(path)) == "src":
        for match in re.finditer(r"\bsuper::(" + ident + ")", text):
            if match.group(1) in known:
                targets.add(match.group(1))
    targets.discard(component)
    return targets


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            scc = []
            while True:
                top = stack.pop()
                on.discard(top)
                scc.append(top)
                if top == node:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def path_in(graph, scc):
    """One cycle through the first node of `scc`, for the message."""
    start = scc[0]
    members = set(scc)
    trail, seen = [start], {start}

    def walk(node):
        for nxt in sorted(graph[node]):
            if nxt == start and len(trail) > 1:
                return True
            if nxt in members and nxt not in seen:
                seen.add(nxt)
                trail.append(nxt)
                if walk(nxt):
                    return True
                trail.pop()
        return False

    walk(start)
    return " -> ".join(trail + [start])


def main():
    main_in(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))


def main_in(repo):
    crates = os.path.join(repo, "crates")
    failed = False
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if not os.path.isdir(src):
            continue
        files = components(src)
        known = {component for component in files.values() if component is not None}
        graph = {component: set() for component in known}
        for path, component in files.items():
            if component is None:
                continue
            graph[component] |= edges_of(path, component, known)
        for scc in cycles(graph):
            failed = True
            print(f"crates/{crate}: import cycle: {path_in(graph, scc)} (components in the cycle: {', '.join(scc)})")
        if crate not in EXEMPT_CRATES:
            failed |= long_parts(repo, files)
        if crate == "server":
            failed |= dialect_routers(repo, files)
            failed |= public_modules(src)
        if crate in CLOCKLESS_CRATES:
            failed |= clocks(repo, files)
        failed |= unsafe_outside_its_files(repo, crate, files)
    if failed:
        sys.exit(1)
    print("layout: no import cycle between components; no file over 1,000 lines and no long-function allow outside bench but the listed debts; one router, one executor, in exec/; no clock in proto or store; unsafe only in the listed files; the server's components pub(crate) but the listed ones")


def long_parts(repo, files):
    """Prints each long file and each long-function allow of one crate that is not a listed
    debt, and each listed debt that is paid; whether any was printed."""
    failed = False
    for path in sorted(files):
        rel = os.path.relpath(path, repo).replace(os.sep, "/")
        with open(path, encoding="utf-8") as source:
            text = source.read()
        breaks = {
            "long file": text.count("\n") > FILE_LINES_MAX,
            ALLOW_LONG: ALLOW_LONG in strip(text),
        }
        for rule, broken in breaks.items():
            debt = DEBTS.get(rel) == rule
            if broken and not debt:
                failed = True
                if rule == "long file":
                    print(f"{rel}: {text.count(chr(10))} lines (at most {FILE_LINES_MAX})")
                else:
                    print(f"{rel}: #[{ALLOW_LONG}] (a function fits in 100 lines)")
            elif debt and not broken:
                failed = True
                print(f"{rel}: no longer a {rule}: take it out of DEBTS in scripts/check-layout.py")
    return failed


def stripped_sources(repo, files):
    """Each of `files` in order: its path from `repo` and its code without comments and literals."""
    for path in sorted(files):
        with open(path, encoding="utf-8") as source:
            yield os.path.relpath(path, repo).replace(os.sep, "/"), strip(source.read())


def line_of(text, at):
    return text.count("\n", 0, at) + 1


def dialect_routers(repo, files):
    """Prints each router of one dialect in the server crate; whether any was printed."""
    failed = False
    for rel, text in stripped_sources(repo, files):
        for found in DIALECT_ROUTER.finditer(text):
            failed = True
            print(f"{rel}: fn route_{found.group(1)}: one router routes every dialect (Engine::route on a Reach)")
        for found in DIALECT_EXECUTOR.finditer(text):
            failed = True
            print(f"{rel}: fn {found.group(1)}: one executor runs every dialect's command (Engine::run_command)")
        if not rel.startswith(EXECUTOR_FOLDER):
            for found in EXECUTE_FN.finditer(text):
                failed = True
                print(f"{rel}:{line_of(text, found.start())}: fn execute outside exec/: requests run in the executor's folder")
    return failed


def public_modules(src):
    """Prints each `pub mod` of the server's lib.rs that SERVER_PUBLIC_MODULES does not list;
    whether any was printed."""
    failed = False
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return False
    with open(lib, encoding="utf-8") as source:
        text = source.read()
    for found in PUBLIC_MOD.finditer(text):
        if found.group(1) not in SERVER_PUBLIC_MODULES:
            failed = True
            print(f"crates/server/src/lib.rs:{line_of(text, found.start())}: pub mod {found.group(1)}: make it pub(crate) (other crates use only {', '.join(SERVER_PUBLIC_MODULES)})")
    return failed


def unsafe_outside_its_files(repo, crate, files):
    """Prints each file of `crate` with `unsafe` code that UNSAFE_FILES does not list, and
    each listed file that has none; whether any was printed."""
    failed = False
    allowed = UNSAFE_FILES.get(crate, ())
    for rel, text in stripped_sources(repo, files):
        in_crate = rel.removeprefix(f"crates/{crate}/")
        found = UNSAFE.search(text)
        if found and in_crate not in allowed:
            failed = True
            print(f"{rel}:{line_of(text, found.start())}: unsafe outside the files UNSAFE_FILES lists in scripts/check-layout.py")
        elif in_crate in allowed and not found:
            failed = True
            print(f"{rel}: no unsafe code left: take it out of UNSAFE_FILES in scripts/check-layout.py")
    return failed


def clocks(repo, files):
    """Prints each clock read in one crate that reads none; whether any was printed."""
    failed = False
    for rel, text in stripped_sources(repo, files):
        for found in CLOCK.finditer(text):
            failed = True
            print(f"{rel}:{line_of(text, found.start())}: {found.group(0)}: this crate reads no clock (the caller passes the time in)")
    return failed


if __name__ == "__main__":
    main()
