#!/usr/bin/env python3
"""Reads scripts/bench-server.sh JSON lines (stdin) and prints a markdown table of ratios."""
import json
import sys

rows = {}
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    key = (r["workers"], r["dataset"], r["get_ratio"], r["dist"], r["depth"])
    rows.setdefault(key, {})[r["name"]] = r

print("| workers | dataset | GET | dist | depth | qs kops/s | mc kops/s | qs CPU µs/op | mc CPU µs/op | CPU ratio qs/mc | qs p50/p99/p99.9 µs | mc p50/p99/p99.9 µs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(rows):
    pair = rows[key]
    if "qs" not in pair or "mc" not in pair:
        continue
    q, m = pair["qs"], pair["mc"]
    ratio = q["server_cpu_us_per_op"] / m["server_cpu_us_per_op"]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {q['ops_per_sec']/1e3:.0f} | {m['ops_per_sec']/1e3:.0f} "
          f"| {q['server_cpu_us_per_op']:.2f} | {m['server_cpu_us_per_op']:.2f} | {ratio:.2f} "
          f"| {q['p50_us']:.0f}/{q['p99_us']:.0f}/{q['p999_us']:.0f} | {m['p50_us']:.0f}/{m['p99_us']:.0f}/{m['p999_us']:.0f} |")
    if q["wrong"] or m["wrong"]:
        print(f"| | wrong replies: qs {q['wrong']} mc {m['wrong']} |")
