#!/usr/bin/env python3
"""Reads `qs-bench compare --json` output (stdin; the last JSON line) and prints markdown tables."""
import json
import sys

report = None
for line in sys.stdin:
    if line.startswith("{"):
        report = json.loads(line)
if report is None:
    sys.exit("no JSON line on stdin")

print(f"{report['quicksilver_version']} against {report['memcached_version']}; ratios are quicksilver / memcached.\n")
print("| workers | workload | depth | quicksilver ops/s | memcached ops/s | ratio | qs CPU µs/op | mc CPU µs/op | CPU ratio | qs p99 µs | mc p99 µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for row in report["rows"]:
    p, q, m = row["point"], row["quicksilver"], row["memcached"]
    workload = f"{p['dataset']} {p['get_ratio'] * 100:.0f}% GET {p['dist']}"
    print(f"| {row['workers']} | {workload} | {p['depth']} | {q['ops_per_sec']:,.0f} | {m['ops_per_sec']:,.0f} | "
          f"{row['ops_ratio']:.2f}x | {q['server_cpu_us_per_op']:.2f} | {m['server_cpu_us_per_op']:.2f} | "
          f"{row['cpu_ratio']:.2f}x | {q['p99_us']:.0f} | {m['p99_us']:.0f} |")
bad = sum(r[s][k] for r in report["rows"] + report["equal_load"] for s in ("quicksilver", "memcached")
          for k in ("errors", "wrong_values", "stale_values"))
print(f"\nErrors, wrong and stale values over every run: {bad}.\n")
if report["equal_load"]:
    print("Equal offered load, open loop (tiny, 95% GET, uniform, 50 connections, depth 16; latency from the scheduled time):\n")
    print("| workers | offered/s | qs delivered/s | mc delivered/s | qs p50/p99/p99.9 µs | mc p50/p99/p99.9 µs | p99 ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in report["equal_load"]:
        q, m = row["quicksilver"], row["memcached"]
        tail = lambda r: f"{r['p50_us']:.0f}/{r['p99_us']:.0f}/{r['p999_us']:.0f}"
        print(f"| {row['workers']} | {q['offered_rate']:,.0f} | {q['ops_per_sec']:,.0f} | {m['ops_per_sec']:,.0f} | "
              f"{tail(q)} | {tail(m)} | {row['p99_ratio']:.2f}x |")
