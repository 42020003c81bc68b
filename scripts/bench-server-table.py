#!/usr/bin/env python3
"""Reads scripts/bench-server.sh JSON lines (stdin) and prints markdown tables: the echo floor,
open-loop latency at equal offered load, and the closed-loop matrix with CPU ratios."""
import json
import sys

def latency(r):
    """p50/p99/p99.9 in whole microseconds."""
    return f"{r['p50_us']:.0f}/{r['p99_us']:.0f}/{r['p999_us']:.0f}"


rows = {}
open_rows = {}
echo = None
uring = {}
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r["name"] == "echo":
        # The floor is the epoll echo server's (quicksilver drives its sockets with epoll);
        # an io_uring echo server, where measured, is shown beside it.
        echo = {f["depth"]: f["server_cpu_us_per_message"]
                for f in r["tcp_echo"] if f.get("io", "epoll") == "epoll"}
        uring = {f["depth"]: f["server_cpu_us_per_message"]
                 for f in r["tcp_echo"] if f.get("io") == "uring"}
        continue
    if r.get("offered_rate"):
        open_rows.setdefault((r["workers"], r["offered_rate"]), {})[r["name"]] = r
        continue
    key = (r["workers"], r["dataset"], r["get_ratio"], r["dist"], r["depth"])
    rows.setdefault(key, {})[r["name"]] = r

if echo:
    print("Echo floor (qs-bench probe, 50 connections, 24-byte messages): " +
          ", ".join(f"depth {d}: {cpu:.3f} µs/message" for d, cpu in sorted(echo.items())))
    if uring:
        print("io_uring echo server, same load: " +
              ", ".join(f"depth {d}: {cpu:.3f} µs/message" for d, cpu in sorted(uring.items())))
    for depth in sorted(echo):
        q = rows.get((1, "Tiny", 0.95, "uniform", depth), {}).get("qs")
        if q:
            print(f"- quicksilver, 1 worker, tiny 95% GET uniform, depth {depth}: "
                  f"{q['server_cpu_us_per_op']:.3f} µs/op = {q['server_cpu_us_per_op'] / echo[depth]:.2f}x the echo floor")
    print()

if open_rows:
    print("| workers | offered ops/s | qs done ops/s | mc done ops/s | qs p50/p99/p99.9 µs | mc p50/p99/p99.9 µs | qs CPU µs/op | mc CPU µs/op |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(open_rows):
        pair = open_rows[key]
        if "qs" not in pair or "mc" not in pair:
            continue
        q, m = pair["qs"], pair["mc"]
        print(f"| {key[0]} | {key[1]:.0f} | {q['ops_per_sec']:.0f} | {m['ops_per_sec']:.0f} "
              f"| {latency(q)} | {latency(m)} "
              f"| {q['server_cpu_us_per_op']:.2f} | {m['server_cpu_us_per_op']:.2f} |")
    print()

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
          f"| {latency(q)} | {latency(m)} |")
    if q["wrong"] or m["wrong"]:
        print(f"| | wrong replies: qs {q['wrong']} mc {m['wrong']} |")
