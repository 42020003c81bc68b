#!/usr/bin/env python3
"""Runs the guides' commands so that they cannot rot (scripts/test.sh calls this).

Every ```sh block of docs/OPERATIONS.md runs under `bash -euo pipefail` in a scratch directory,
with target/release (quicksilver, qs-bench) first on PATH and the ports it names (11211-11213,
11300, 22122, 6379) moved to free ones. The HTML comment before a block says how:

- `test: server` - a quicksilver (-m 64, one worker) is started on the block's 11211 first and
  stopped after;
- `test: own` - the block starts and stops its own servers;
- `test: own-continued` - as own, in the previous block's directory and ports;
- `test: install` - installs the Debian package (run as root only, then removed again);
- `test: systemd` - needs systemd as init, which the test machine lacks: the block runs with its
  files written under a scratch /etc and `systemctl` replaced by `systemd-analyze verify` of the
  packaged unit with the drop-ins the block wrote.

A block fails when it exits non-zero, prints an error reply (`ERROR`, `SERVER_ERROR`,
`CLIENT_ERROR`), or lacks an output its comment names (`test: own; expect: A && B`). Then every message in the guide's troubleshooting table is provoked from a real
server and checked to read as the table says.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from benchlib import free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(HERE)
RELEASE = os.path.join(ROOT, "target", "release")
QS = os.path.join(RELEASE, "quicksilver")
GUIDE = os.path.join(ROOT, "docs", "OPERATIONS.md")
PORTS = ["11211", "11212", "11213", "11300", "22122", "22123", "6379", "6380", "6381", "9150"]
FAILURES = []


def report(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def blocks(path):
    """(mode, expected output, first line number, text) of each ```sh block."""
    lines = open(path).read().split("\n")
    mode, expect, found = "server", [], []
    i = 0
    while i < len(lines):
        marker = re.match(r"<!-- test: ([a-z-]+)(?:; expect: (.*?))? -->", lines[i])
        if marker:
            mode = marker.group(1)
            expect = marker.group(2).split(" && ") if marker.group(2) else []
        if lines[i].strip() == "```sh":
            start = i + 1
            end = lines.index("```", start)
            found.append((mode, expect, start + 1, "\n".join(lines[start:end]) + "\n"))
            mode, expect = "server", []
            i = end
        i += 1
    return found


def proxy_bin():
    """A directory whose `memcached` is memcached 1.6.45 built with its proxy
    (QS_MEMCACHED_PROXY, scripts/build-memcached-proxy.sh), for the scaling section's routes.lua
    blocks; no other block runs memcached itself."""
    proxy = os.environ.get("QS_MEMCACHED_PROXY")
    if not proxy:
        proxy = subprocess.run(["bash", os.path.join(HERE, "build-memcached-proxy.sh")], check=True,
                               capture_output=True, text=True).stdout.strip()
    directory = tempfile.mkdtemp(prefix="qs-guide-proxy-")
    os.symlink(proxy, os.path.join(directory, "memcached"))
    return directory


PROXY_BIN = None


def environment():
    global PROXY_BIN
    if PROXY_BIN is None:
        PROXY_BIN = proxy_bin()
    env = dict(os.environ)
    # The system's python3 (Debian's python3-pylibmc is the guide's client) before any other.
    env["PATH"] = os.pathsep.join([RELEASE, PROXY_BIN, "/usr/bin", env["PATH"]])
    return env


def run_block(text, cwd, timeout=120):
    return subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=timeout)


def stop_strays(ports):
    """Servers a failed block left behind, found by the ports on their command lines."""
    for port in ports.values():
        subprocess.run(["pkill", "-f", rf"(quicksilver|nutcracker|memcached).*[ :]{port}\b"], capture_output=True)


def run_guide():
    ports, scratch = {}, None
    for mode, expect, line, text in blocks(GUIDE):
        what = f"OPERATIONS.md line {line} ({mode})"
        if mode == "systemd":
            run_systemd_block(what, text)
            continue
        if mode == "install":
            if os.getuid() != 0:
                print(f"SKIPPED {what}: installing the package needs root")
                continue
            result = run_block(text, ROOT, timeout=600)
            report(result.returncode == 0 and "quicksilver" in result.stdout, what, result.stdout + result.stderr)
            subprocess.run(["dpkg", "--purge", "quicksilver"], capture_output=True)
            continue
        if mode != "own-continued" or scratch is None:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            scratch = tempfile.mkdtemp(prefix="qs-guide-")
            # Readable by memcached's proxy, which runs as nobody (-u) and reads routes.lua here.
            os.chmod(scratch, 0o755)
            ports = {port: str(free_port()) for port in PORTS}
        body = re.sub(r"\b(" + "|".join(PORTS) + r")\b", lambda m: ports[m.group(1)], text)
        server = None
        if mode == "server":
            server = subprocess.Popen([QS, "-p", ports["11211"], "-U", "0", "-m", "64", "-t", "1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(int(ports["11211"]))
        try:
            result = run_block(body, scratch)
        except subprocess.TimeoutExpired as error:
            result = subprocess.CompletedProcess(error.cmd, 124, error.stdout or "", "timed out")
        finally:
            if server:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=20)
        output = result.stdout + result.stderr
        if os.environ.get("QS_GUIDE_VERBOSE"):
            print(output)
        error_reply = re.search(r"^(ERROR|SERVER_ERROR|CLIENT_ERROR)", result.stdout, re.M)
        missing = [text for text in expect if text not in result.stdout]
        report(result.returncode == 0 and not error_reply and not missing, what,
               f"status {result.returncode}, expected but missing: {missing}\n{output[-3000:]}")
        if result.returncode != 0:
            stop_strays(ports)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


SYSTEMCTL = """#!/bin/sh
# test-guides.py's systemctl: systemd is not init on the test machine, so instead of acting on
# the service this verifies the packaged unit and the drop-ins the block wrote beside it.
out=$(systemd-analyze verify --man=no "$QS_UNITS/quicksilver.service" 2>&1)
[ -z "$out" ] || { echo "$out" >&2; exit 1; }
echo "systemctl $*: the unit and its drop-ins verify"
"""


def run_systemd_block(what, text):
    """A block for systemd: its files are written under a scratch /etc, and each systemctl
    verifies the packaged unit with the drop-ins written (systemd-analyze verify reports bad
    keys and syntax there); the block's other commands run as written."""
    if shutil.which("systemd-analyze") is None:
        syntax = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
        report(syntax.returncode == 0, f"{what}: shell syntax only (no systemd-analyze here)", syntax.stderr)
        return
    scratch = tempfile.mkdtemp(prefix="qs-guide-systemd-")
    try:
        units, shims = f"{scratch}/units", f"{scratch}/bin"
        os.makedirs(units)
        os.makedirs(shims)
        unit = open(os.path.join(ROOT, "crates/server/debian/quicksilver.service")).read()
        with open(f"{units}/quicksilver.service", "w") as f:
            f.write(unit.replace("/usr/bin/quicksilver", QS))
        for name, body in [("systemctl", SYSTEMCTL), ("journalctl", "#!/bin/sh\nexit 0\n")]:
            with open(f"{shims}/{name}", "w") as f:
                f.write(body)
            os.chmod(f"{shims}/{name}", 0o755)
        shutil.copy(os.path.join(ROOT, "crates/server/debian/quicksilver.conf"), f"{scratch}/quicksilver.conf")
        body = text.replace("/etc/systemd/system", units).replace("/etc/quicksilver.conf", f"{scratch}/quicksilver.conf")
        env = environment()
        env["PATH"] = shims + os.pathsep + env["PATH"]
        env["QS_UNITS"] = units
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=scratch, env=env,
                                capture_output=True, text=True, timeout=60)
        report(result.returncode == 0 and "verify" in result.stdout,
               f"{what}: its drop-ins and the unit verify (systemctl stands in: systemd is not init here)",
               result.stdout + result.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- The troubleshooting table, provoked ---

def table_rows():
    text = open(GUIDE).read().split("## Troubleshooting", 1)[1]
    return [re.search(r"`([^`]*)`", line).group(1) for line in text.split("\n")
            if line.startswith("| `")]


def start(args, env=None):
    port = free_port()
    process = subprocess.Popen([QS, "-p", str(port), "-U", "0", "-t", "1", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
    return process, port


def ready(port, process):
    """Waits until the server answers (not only accepts: the port is bound before the pid file
    is written and the user switched, and the workers serve only after both)."""
    for _ in range(200):
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"version\r\n")
                if s.recv(64).startswith(b"VERSION"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[0]


def output_of(args, env=None):
    """What a server started with `args` prints, having run a moment (or exited at once)."""
    process, port = start(args, env)
    ready(port, process)
    return stop(process)


def exit_output(args):
    """What a server started with `args` prints before it exits by itself (a start that fails)."""
    try:
        done = subprocess.run([QS, "-p", str(free_port()), "-U", "0", "-t", "1", *args], capture_output=True,
                              text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "(did not exit)"
    return done.stdout + done.stderr


def reply(port, data):
    """The server's answers to `data`, read until `quit` closes the connection."""
    return benchlib.request(port, data + b"quit\r\n").decode(errors="replace")


def served(args, data):
    process, port = start(args)
    ready(port, process)
    try:
        return reply(port, data)
    finally:
        stop(process)


def provoke(message, scratch):
    """What a server prints or answers in the situation the table describes for `message`."""
    if message.startswith("failed to listen on"):
        first, port = start([])
        ready(port, first)
        second = subprocess.run([QS, "-p", str(port), "-U", "0", "-t", "1"], capture_output=True, text=True)
        stop(first)
        return second.stderr.replace(str(port), "11211")
    if message.startswith("Could not open the pid file"):
        return output_of(["-P", "/nonexistent-dir/quicksilver.pid"])
    if message.startswith("can't find the user"):
        if os.getuid() != 0:
            return None
        # The ports are bound before the user is looked up: wait for the exit, not the port.
        return exit_output(["-u", "memcache-not-here"]).replace("memcache-not-here", "memcache")
    if message.startswith("cannot read the config file"):
        return exit_output(["--config-file", f"{scratch}/missing.conf"])
    if message.startswith("is neither an option"):
        path = f"{scratch}/bad.conf"
        open(path, "w").write("-m 64\nmemory 64\n")
        return exit_output(["--config-file", path])
    if message.startswith("open-file limit"):
        soft_hard = "ulimit -n 200; exec " + " ".join([QS, "-c", "1024", "-v"])
        port = free_port()
        process = subprocess.Popen(["bash", "-c", soft_hard + f" -p {port} -U 0 -t 1"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        ready(port, process)
        return stop(process)
    if message.startswith("[restart] no memory file at"):
        return output_of(["-e", f"/dev/shm/qs-guide-{os.getpid()}-a"]) + cleanup_memory("a")
    if message.startswith("[restart] ... was laid out"):
        path = f"/dev/shm/qs-guide-{os.getpid()}-b"
        output_of(["-e", path, "-m", "64"])
        return output_of(["-e", path, "-m", "128"]) + cleanup_memory("b")
    if message.startswith("the memory file needs"):
        # A 4 MiB tmpfs of its own, for a 64 MiB memory file (root only).
        mount = f"{scratch}/small-tmpfs"
        os.makedirs(mount, exist_ok=True)
        if os.getuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount],
                                              capture_output=True).returncode != 0:
            return None
        try:
            return exit_output(["-e", f"{mount}/memory", "-m", "64"])
        finally:
            subprocess.run(["umount", mount], capture_output=True)
    if message.startswith("Error loading the certificate chain"):
        return exit_output(["-Z", "-o", "ssl_chain_cert=/nonexistent.pem,ssl_key=/nonexistent.pem"])
    if message.startswith("SERVER_ERROR out of memory storing object"):
        value = b"x" * 500_000
        fill = b"".join(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(value), value) for i in range(12))
        return served(["-M", "-m", "4"], fill)
    if message.startswith("You cannot allow the ASCII protocol while using SASL"):
        return exit_output(["-S", "-l", f"proto[ascii]:127.0.0.1:{free_port()}"])
    if message.startswith("SERVER_ERROR object too large"):
        value = b"x" * (2 << 20)
        return served([], b"set big 0 0 %d\r\n%s\r\n" % (len(value), value))
    if message.startswith("CLIENT_ERROR watch"):
        return served(["-W"], b"watch\r\n")
    if message.startswith("CLIENT_ERROR flush_all"):
        return served(["-F"], b"flush_all\r\n")
    if message.startswith("rejected_connections"):
        return served([], b"stats\r\n").replace("STAT ", "")
    if message.startswith("extstore_failed"):
        return served(["-o", f"ext_path={scratch}/flash:64m"], b"stats\r\n").replace("STAT ", "")
    return None


def cleanup_memory(suffix):
    for path in [f"/dev/shm/qs-guide-{os.getpid()}-{suffix}", f"/dev/shm/qs-guide-{os.getpid()}-{suffix}.meta"]:
        if os.path.exists(path):
            os.unlink(path)
    return ""


def run_table():
    scratch = tempfile.mkdtemp(prefix="qs-guide-table-")
    try:
        for message in table_rows():
            got = provoke(message, scratch)
            if got is None:
                print(f"SKIPPED troubleshooting `{message}`: needs root (and, for a small tmpfs, mount)")
                continue
            # The table's `...` stands for the varying part; `grows` and `1` describe values.
            pattern = re.escape(message.replace(" grows", "").replace("extstore_failed 1", "extstore_failed"))
            pattern = pattern.replace(re.escape("..."), ".*")
            report(re.search(pattern, got) is not None, f"troubleshooting `{message}` is what the server says",
                   got[-1500:])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- Links between the docs ---

def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def check_links():
    """Every relative link in README.md and docs/ names a file that exists and, with #, a heading in it."""
    pages = [os.path.join(ROOT, "README.md")] + [
        os.path.join(folder, name) for folder, _, names in os.walk(os.path.join(ROOT, "docs"))
        for name in names if name.endswith(".md")]
    bad = []
    for page in pages:
        text = open(page).read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(resolved):
                bad.append(f"{os.path.relpath(page, ROOT)}: {target} (no such file)")
                continue
            if fragment and resolved.endswith(".md"):
                headings = re.findall(r"^#+ (.*)$", open(resolved).read(), re.M)
                if fragment not in {anchor(h) for h in headings}:
                    bad.append(f"{os.path.relpath(page, ROOT)}: {target} (no such heading)")
    report(not bad, f"every relative link in README.md and docs/ resolves ({len(pages)} pages)", "\n".join(bad))


def main():
    if not os.path.exists(QS):
        sys.exit(f"{QS} is missing: cargo build --release -p qs-server -p qs-bench")
    check_links()
    run_guide()
    run_table()
    if FAILURES:
        print(f"{len(FAILURES)} guide check(s) failed")
        sys.exit(1)
    print("every guide command ran")


if __name__ == "__main__":
    main()
