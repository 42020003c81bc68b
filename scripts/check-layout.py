#!/usr/bin/env python3
"""Layout rules the compiler does not check, run by scripts/test.sh.

1. No import cycle between a crate's components. A component is a top-level module of the
   crate (a file beside lib.rs/main.rs, or a folder with its mod.rs); the files inside one
   folder are one component, as the files of one crate are (Cargo, too, allows cycles inside a
   crate and refuses them between crates). The crate root (lib.rs, main.rs) is the crate's
   face, not a component: it declares the components and re-exports what the crate offers.
   An edge A -> B is any path in A's files that names B: `crate::B...` (or B in a
   `crate::{...}` group), or `super::B...` from a file beside the root.
2. No source file of the server crate over 1,000 lines.

Prints every cycle (as component -> component -> ...) and every long file; exits 1 if any.

    scripts/check-layout.py [REPO]
"""
import os
import re
import sys

FILE_LINES_MAX = 1000
LONG_FILE_CRATES = ("server",)

ident = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """The text without comments, string literals and char literals (paths inside them are not
    imports)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'b?r(#*)".*?"\1', '""', text, flags=re.S)
    text = re.sub(r'b?"(\\.|[^"\\])*"', '""', text, flags=re.S)
    text = re.sub(r"b?'(\\.|[^'\\])'", "' '", text)
    return text


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
    text = strip(open(path, encoding="utf-8").read())
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
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
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
        if crate in LONG_FILE_CRATES:
            for path in sorted(files):
                lines = sum(1 for _ in open(path, encoding="utf-8"))
                if lines > FILE_LINES_MAX:
                    failed = True
                    print(f"{os.path.relpath(path, repo)}: {lines} lines (at most {FILE_LINES_MAX})")
    if failed:
        sys.exit(1)
    print("layout: no import cycle between components; no server file over 1,000 lines")


if __name__ == "__main__":
    main()
