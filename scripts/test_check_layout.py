#!/usr/bin/env python3
"""Tests of scripts/check-layout.py (run by scripts/test.sh):

    python3 -m unittest scripts/test_check_layout.py
"""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

spec = importlib.util.spec_from_file_location(
    "check_layout", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-layout.py"))
layout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layout)


def write(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as out:
            out.write(text)


def run(files):
    """check-layout's output and exit status on a repository made of `files`."""
    with tempfile.TemporaryDirectory() as root:
        write(root, files)
        printed = io.StringIO()
        status = 0
        with contextlib.redirect_stdout(printed):
            try:
                layout.main_in(root)
            except SystemExit as exit_:
                status = exit_.code
        return printed.getvalue(), status


class Strip(unittest.TestCase):
    def test_a_carriage_return_before_a_closing_quote_is_not_a_raw_string(self):
        # bench/load.rs's progress line: read as the start of a raw string, it hid the rest of
        # the file and with it the load -> native -> probe -> load cycle.
        text = 'print!("\\r{:100}\\r");\nuse crate::probe::x;'
        self.assertIn("crate::probe", layout.strip(text))

    def test_literals_and_comments_go_and_code_stays(self):
        cases = {
            'r#"crate::a "# ; crate::b': "crate::b",
            "let c = '\"'; crate::c": "crate::c",
            "fn f<'a>(x: &'a str) { crate::d }": "crate::d",
            "/* outer /* inner */ crate::no */ crate::e": "crate::e",
            "b'\\\\'; crate::f": "crate::f",
            '"a\\"crate::no"; crate::g': "crate::g",
            "// crate::no\ncrate::h": "crate::h",
        }
        for text, kept in cases.items():
            stripped = layout.strip(text)
            self.assertIn(kept, stripped, text)
            self.assertNotIn("crate::a", stripped, text)
            self.assertNotIn("crate::no", stripped, text)


class Rules(unittest.TestCase):
    def test_a_cycle_behind_the_progress_line_is_found(self):
        output, status = run({
            "crates/bench/src/lib.rs": "pub mod load; pub mod native; pub mod probe;\n",
            "crates/bench/src/load.rs": 'fn p() { print!("\\r{:100}\\r"); }\nuse crate::native::run;\n',
            "crates/bench/src/native.rs": "use crate::probe::start;\n",
            "crates/bench/src/probe.rs": "use crate::load::cpu;\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/bench: import cycle: load -> native -> probe -> load", output)

    def test_long_files_and_long_function_allows_fail_outside_bench_only(self):
        long_text = "fn f() {}\n" * 1001
        allow = "#[allow(clippy::too_many_lines)]\nfn g() {}\n"
        output, status = run({
            "crates/proto/src/lib.rs": "mod a;\n",
            "crates/proto/src/a.rs": long_text,
            "crates/proto/src/b.rs": allow,
            "crates/bench/src/lib.rs": "mod c;\n",
            "crates/bench/src/c.rs": long_text + allow,
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/proto/src/a.rs: 1001 lines", output)
        self.assertIn("crates/proto/src/b.rs: #[allow(clippy::too_many_lines)]", output)
        self.assertNotIn("crates/bench", output)

    def test_a_paid_debt_must_leave_the_list(self):
        debts = dict(layout.DEBTS)
        layout.DEBTS["crates/server/src/worker/window.rs"] = layout.ALLOW_LONG
        self.addCleanup(lambda: (layout.DEBTS.clear(), layout.DEBTS.update(debts)))
        output, status = run({
            "crates/server/src/main.rs": "mod worker;\n",
            "crates/server/src/worker/window.rs": "fn short() {}\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/server/src/worker/window.rs: no longer a allow(clippy::too_many_lines)", output)

    def test_a_dialect_router_in_the_server_fails(self):
        output, status = run({
            "crates/server/src/main.rs": "mod exec;\n",
            "crates/server/src/exec/route.rs": "fn route(&self) {}\nfn route_keys() {}\n// fn route_meta\n",
            "crates/server/src/exec/resp.rs": "pub(super) fn route_resp(&self) -> Route {}\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/server/src/exec/resp.rs: fn route_resp", output)
        self.assertNotIn("route.rs", output)

    def test_a_dialect_executor_in_the_server_fails(self):
        output, status = run({
            "crates/server/src/main.rs": "mod exec;\n",
            "crates/server/src/exec/run.rs": "fn run_command() {}\nfn binary_admin() {}\nfn meta_item() {}\n",
            "crates/server/src/exec/resp.rs": "pub(super) fn resp_set(&self) {}\nfn execute_binary() {}\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/server/src/exec/resp.rs: fn resp_set", output)
        self.assertIn("crates/server/src/exec/resp.rs: fn execute_binary", output)
        self.assertNotIn("run.rs", output)

    def test_an_execute_outside_exec_fails_in_the_server(self):
        output, status = run({
            "crates/server/src/main.rs": "mod exec;\nmod native;\n",
            "crates/server/src/exec/mod.rs": "pub fn execute(&mut self) {}\n",
            "crates/server/src/native.rs": "fn answer_request() {}\n\nfn execute(engine: &mut Engine) {}\n",
            "crates/store/src/lib.rs": "pub fn execute() {}\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/server/src/native.rs:3: fn execute outside exec/", output)
        self.assertNotIn("exec/mod.rs", output)
        self.assertNotIn("store", output)

    def test_a_public_server_component_not_listed_fails(self):
        output, status = run({
            "crates/server/src/lib.rs": "pub mod config;\npub(crate) mod exec;\npub mod worker;\nmod warm;\n",
            "crates/server/src/config.rs": "",
            "crates/server/src/exec.rs": "",
            "crates/server/src/worker.rs": "",
            "crates/server/src/warm.rs": "",
            "crates/store/src/lib.rs": "pub mod partition;\n",
            "crates/store/src/partition.rs": "",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/server/src/lib.rs:3: pub mod worker: make it pub(crate)", output)
        self.assertNotIn("config", output.split("make it")[0])
        self.assertNotIn("exec", output)
        self.assertNotIn("store", output)

    def test_a_clock_in_proto_or_store_fails(self):
        output, status = run({
            "crates/proto/src/lib.rs": "mod a;\nfn f() { let t = std::time::SystemTime::now(); }\n",
            "crates/proto/src/a.rs": "// Instant::now in a comment\nfn g() { crate::clock::now() }\n",
            "crates/store/src/lib.rs": "fn h() { Instant::now() }\n",
            "crates/server/src/main.rs": "fn main() { Instant::now(); }\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/proto/src/lib.rs:2: SystemTime::now", output)
        self.assertIn("crates/proto/src/a.rs:2: clock::now", output)
        self.assertIn("crates/store/src/lib.rs:1: Instant::now", output)
        self.assertNotIn("server", output)

    def test_unsafe_outside_the_listed_files_fails(self):
        output, status = run({
            "crates/proto/src/lib.rs": "mod a;\n// unsafe in a comment\n#![forbid(unsafe_code)]\n",
            "crates/proto/src/a.rs": "fn f() {}\nfn g() { unsafe { h() } }\n",
            "crates/net/src/lib.rs": "pub unsafe fn raw() {}\n",
            "crates/net/src/uring.rs": "fn safe_now() {}\n",
        })
        self.assertEqual(status, 1)
        self.assertIn("crates/proto/src/a.rs:2: unsafe outside", output)
        self.assertNotIn("crates/proto/src/lib.rs", output)
        self.assertNotIn("crates/net/src/lib.rs", output)
        self.assertIn("crates/net/src/uring.rs: no unsafe code left", output)

    def test_a_clean_tree_passes(self):
        output, status = run({"crates/proto/src/lib.rs": "mod a;\n", "crates/proto/src/a.rs": "fn f() {}\n"})
        self.assertEqual(status, 0, output)
        # Debts whose files are absent are not checked.
        self.assertIn("layout: no import cycle", output)


if __name__ == "__main__":
    unittest.main()
