#!/usr/bin/env python3
"""Turns scripts/bench-engine.sh's JSON lines into the markdown table of docs/benchmarks/HISTORY.md,
with Quicksilver/hashbrown and prefetch on/off ratios computed within the same run."""
import json
import sys

rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
by_key = {(r["store"], r["dataset"], r["dist"], r["get_ratio"], r["prefetch"]): r for r in rows}
print("| dataset | dist | GET | Mops/s prefetch on | off | on/off | hashbrown Mops/s | qs/hashbrown | ns/op | hit ratio | items/GiB | overhead B/item | pages |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["store"] != "qs" or r["prefetch"] != "on":
        continue
    key = (r["dataset"], r["dist"], r["get_ratio"])
    off = by_key.get(("qs", *key, "off"))
    hb = by_key.get(("hashbrown", *key, "on"))
    print(
        f"| {r['dataset']} ({r['keys']:,} keys) | {r['dist']} | {r['get_ratio']:.0%} | {r['mops']:.2f} | "
        f"{off['mops']:.2f} | {r['mops'] / off['mops']:.2f}x | {hb['mops']:.2f} | {r['mops'] / hb['mops']:.2f}x | "
        f"{r['ns_per_op']:.1f} | {r['hit_ratio']:.4f} | {r['items_per_gib'] / 1e6:.1f} M | "
        f"{r['overhead_bytes_per_item']:.1f} | {r['log_pages']} |"
    )
