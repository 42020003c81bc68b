#!/usr/bin/env python3
"""The Debian package's tests (scripts/test.sh runs them after scripts/package.sh built it).

- Its metadata and contents (dpkg-deb): the binary, /etc/quicksilver.conf as a conffile, the
  systemd unit, the man page, the guides; Depends computed from the binary's libraries.
- Unpacked into a temporary root (dpkg -x), the packaged binary starts from the packaged config
  (the port overridden on the command line), answers, and stops with the unit's KillSignal,
  exiting 0; with -e, what it held is there again after the restart (a warm restart).
- Debian's own /etc/memcached.conf (the memcached package's) starts it unchanged.
- `systemd-analyze verify` accepts the unit, and its exposure under `systemd-analyze security`
  is at most 2.0 (memcached's unit: 4.8); where strace exists, every system call the server
  makes while serving is in the unit's SystemCallFilter.
- The man page renders (`man -l`) and documents --config-file.

Usage: test-package.py PATH.deb
"""
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import free_port, wait_port  # noqa: E402

FAILURES = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILURES.append(what)


def run(*args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def request(port, data, until=b"\r\n"):
    return benchlib.request(port, data, until)


def unit_setting(unit_text, name):
    values = re.findall(rf"^{name}=(.*)$", unit_text, re.M)
    return values[-1].strip() if values else None


class Server:
    """The packaged binary, started with `args`; stopped by PID."""

    def __init__(self, binary, args, wrap=()):
        self.port = free_port()
        self.process = subprocess.Popen(
            [*wrap, binary, *args, "-p", str(self.port), "-U", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_port(self.port)
        # The server's own pid: under a wrapper (strace), the wrapper's child.
        self.pid = self.process.pid
        if wrap:
            children = run("pgrep", "-P", str(self.pid)).stdout.split()
            self.pid = int(children[0])

    def stop(self, sig):
        os.kill(self.pid, sig)
        try:
            out, _ = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
            return None, out
        return self.process.returncode, out


def main():
    deb = os.path.abspath(sys.argv[1])
    info = run("dpkg-deb", "--info", deb).stdout
    fields = {name: run("dpkg-deb", "-f", deb, name).stdout.strip()
              for name in ["Package", "Version", "Architecture", "Depends", "Section", "Maintainer"]}
    check(fields["Package"] == "quicksilver", f"package name quicksilver ({fields['Package']})")
    check(re.fullmatch(r"\d+\.\d+\.\d+-\d+", fields["Version"]) is not None, f"version {fields['Version']}")
    check(fields["Architecture"] == run("dpkg", "--print-architecture").stdout.strip(), "architecture")
    check(fields["Depends"].startswith("libc6"), f"Depends from the binary's libraries ({fields['Depends']})")
    check(fields["Section"] == "web", "section web (memcached's)")
    check(all(script in info for script in ["postinst", "prerm", "postrm", "conffiles"]),
          "maintainer scripts (the unit enabled and started by deb-systemd-helper) and conffiles")
    conffiles = run("sh", "-c", f"dpkg-deb --ctrl-tarfile {deb} | tar -xO ./conffiles").stdout
    check(conffiles.split() == ["/etc/quicksilver.conf"], "/etc/quicksilver.conf is a conffile")
    contents = run("dpkg-deb", "--contents", deb).stdout
    for path in ["./usr/bin/quicksilver", "./etc/quicksilver.conf", "./usr/lib/systemd/system/quicksilver.service",
                 "./usr/share/man/man1/quicksilver.1.gz", "./usr/share/doc/quicksilver/OPERATIONS.md",
                 "./usr/share/doc/quicksilver/COMPATIBILITY.md", "./usr/share/doc/quicksilver/copyright"]:
        check(re.search(rf" {re.escape(path)}$", contents, re.M) is not None, f"contains {path}")

    root = tempfile.mkdtemp(prefix="qs-package-")
    try:
        subprocess.run(["dpkg", "-x", deb, root], check=True)
        test_unpacked(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} package check(s) failed")
        sys.exit(1)
    print("all package checks passed")


def test_unpacked(root):
    binary = f"{root}/usr/bin/quicksilver"
    config = f"{root}/etc/quicksilver.conf"
    unit_path = f"{root}/usr/lib/systemd/system/quicksilver.service"
    unit = open(unit_path).read()
    check("--config-file /etc/quicksilver.conf" in unit_setting(unit, "ExecStart"), "the unit starts from the config")
    stop_name = unit_setting(unit, "KillSignal") or "SIGTERM"
    stop_signal = getattr(signal, stop_name)
    check(unit_setting(unit, "Restart") == "on-failure", "the unit restarts on failure")
    check(int(unit_setting(unit, "LimitNOFILE")) >= 1024 + 64, "LimitNOFILE covers memcached's -c 1024")
    for setting in ["NoNewPrivileges", "PrivateTmp", "DynamicUser"]:
        check(unit_setting(unit, setting) == "yes", f"the unit sets {setting}=yes")
    check(unit_setting(unit, "CapabilityBoundingSet") == "", "the unit holds no capabilities")

    # The packaged binary from the packaged config, the port the test's.
    server = Server(binary, ["--config-file", config])
    check(request(server.port, b"set pkg 0 0 2\r\nok\r\n") == b"STORED\r\n", "packaged server stores")
    check(request(server.port, b"get pkg\r\n", b"END\r\n") == b"VALUE pkg 0 2\r\nok\r\nEND\r\n", "and serves")
    settings = request(server.port, b"stats settings\r\n", b"END\r\n").decode()
    check("STAT maxbytes 67108864\r\n" in settings, "the config's -m 64")
    status, out = server.stop(stop_signal)
    check(status == 0, f"{stop_name} (the unit's KillSignal) stops it gracefully, status 0 ({status}; {out!r})")

    # With -e, the unit's stop signal leaves the cache for the next start.
    memory = tempfile.mktemp(prefix="qs-package-memory-", dir="/dev/shm")
    try:
        server = Server(binary, ["--config-file", config, "-e", memory])
        request(server.port, b"set warm 0 0 4\r\nkept\r\n")
        status, _ = server.stop(stop_signal)
        server = Server(binary, ["--config-file", config, "-e", memory])
        reply = request(server.port, b"get warm\r\n", b"END\r\n")
        check(reply == b"VALUE warm 0 4\r\nkept\r\nEND\r\n", f"with -e, {stop_name} then a start is a warm restart")
        server.stop(stop_signal)
    finally:
        for path in [memory, memory + ".meta"]:
            if os.path.exists(path):
                os.unlink(path)

    # Debian's shipped /etc/memcached.conf, unchanged (its -P and -u as memcached's package
    # has them: the test overrides only the port and, to leave memcached's alone, the pid file).
    debian = "/etc/memcached.conf"
    check(os.path.exists(debian), "Debian's /etc/memcached.conf is here (the memcached package)")
    if os.path.exists(debian):
        copy = tempfile.mktemp(prefix="qs-memcached-", suffix=".conf")
        shutil.copy(debian, copy)
        pid = tempfile.mktemp(prefix="qs-memcached-", suffix=".pid")
        try:
            server = Server(binary, ["--config-file", copy, "-P", pid])
            check(request(server.port, b"set deb 0 0 1\r\n1\r\n") == b"STORED\r\n", "memcached.conf starts it")
            settings = request(server.port, b"stats settings\r\n", b"END\r\n").decode()
            check("STAT maxbytes 67108864\r\n" in settings and "STAT maxconns 1024\r\n" in settings,
                  "with memcached.conf's -m 64 and memcached's -c 1024")
            check(server.process.poll() is None, "in the foreground (memcached.conf's -d skipped)")
            status, _ = server.stop(stop_signal)
            check(status == 0, "and stops with the unit's signal")
        finally:
            for path in [copy, pid]:
                if os.path.exists(path):
                    os.unlink(path)

    check_unit_tools(root, binary, config, unit, stop_signal)

    man = f"{root}/usr/share/man/man1/quicksilver.1.gz"
    rendered = run("man", "-l", man, env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100"})
    check(rendered.returncode == 0 and "--config-file" in rendered.stdout and "SIGUSR1" in rendered.stdout,
          "man -l renders the man page, with --config-file and the stop signal")
    check(gzip.open(man).read().startswith(b".ie"), "the man page is roff")


def check_unit_tools(root, binary, config, unit, stop_signal):
    """systemd-analyze on the unit, with ExecStart pointing at the unpacked binary."""
    if shutil.which("systemd-analyze") is None:
        print("SKIPPED: systemd-analyze is not installed (the systemd package)")
        return
    unit_dir = tempfile.mkdtemp(prefix="qs-unit-")
    try:
        path = f"{unit_dir}/quicksilver.service"
        with open(path, "w") as f:
            f.write(unit.replace("/usr/bin/quicksilver", binary))
        verify = run("systemd-analyze", "verify", "--man=no", path)
        check(verify.returncode == 0, f"systemd-analyze verify accepts the unit {verify.stderr.strip()}")
        security = run("systemd-analyze", "security", "--offline=yes", path)
        level = re.search(r"Overall exposure level for quicksilver.service: ([\d.]+)", security.stdout)
        check(level is not None and float(level.group(1)) <= 2.0,
              f"systemd-analyze security: exposure {level.group(1) if level else '?'} (at most 2.0)")
    finally:
        shutil.rmtree(unit_dir, ignore_errors=True)
    if shutil.which("strace") is None:
        print("SKIPPED: strace is not installed; the system-call filter is not checked")
        return
    allowed = expand_syscall_group(unit_setting(unit, "SystemCallFilter"))
    trace = tempfile.mktemp(prefix="qs-strace-")
    try:
        server = Server(binary, ["--config-file", config, "-e", trace + ".memory"],
                        wrap=["strace", "-f", "-qq", "-o", trace])
        request(server.port, b"set s 0 0 1\r\n1\r\n")
        for command in [b"get s\r\n", b"stats\r\n", b"stats settings\r\n", b"stats mrc\r\n"]:
            request(server.port, command, b"END\r\n")
        server.stop(stop_signal)
        used = set(re.findall(r"^\d+ +([a-z0-9_]+)\(", open(trace).read(), re.M))
        outside = sorted(used - allowed - {"execve"})
        check(len(used) > 20 and not outside,
              f"every system call of {len(used)} made is in SystemCallFilter ({outside or 'none outside'})")
    finally:
        for path in [trace, trace + ".memory", trace + ".memory.meta"]:
            if os.path.exists(path):
                os.unlink(path)


def expand_syscall_group(group):
    """The system calls in a SystemCallFilter group, its nested groups expanded."""
    out = run("systemd-analyze", "syscall-filter", group).stdout.splitlines()[1:]
    calls = set()
    for line in out:
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        calls |= expand_syscall_group(name) if name.startswith("@") else {name}
    return calls


if __name__ == "__main__":
    main()
