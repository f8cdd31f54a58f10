#!/usr/bin/env python3
"""kvbench-median.py OUT: per configuration of a kvbench-rounds.sh file,
the median over rounds of each run's medians (CPU and wall, write and
restore, raw plain and raw encrypted) and the delta pack's figures; where
the runs have them, the raw plain pack's repeated restores (memo) and first
restores into a new session."""
import json, statistics, sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    runs[d["config"]].append(d)
med = statistics.median
print("config rounds load | plain: write cpu ms (GB/s) wall ms, restore cpu ms wall ms | encrypted: write cpu, restore cpu | delta-256 write cpu, chain restore cpu")
for name, rs in runs.items():
    p = [next(v for v in r["packs"] if v["variant"] == "raw-plain") for r in rs]
    e = [next(v for v in r["packs"] if v["variant"] == "raw-encrypted") for r in rs]
    dl = [next((v for v in r["packs"] if v["variant"] == "raw-plain-delta-256"), None) for r in rs]
    kvb = rs[0]["kv_bytes"]
    wc = med(x["write_cpu_s"] for x in p) * 1e3
    print(f"{name} {len(rs)} {med(r['load1'] for r in rs):.1f} | {wc:.1f} ({kvb / wc / 1e6:.2f}) {med(x['write_s'] for x in p) * 1e3:.1f}, "
          f"{med(x['restore_cpu_ms'] for x in p):.1f} {med(x['restore_ms'] for x in p):.1f} | "
          f"{med(x['write_cpu_s'] for x in e) * 1e3:.1f}, {med(x['restore_cpu_ms'] for x in e):.1f} | "
          + (f"{med(x['write_cpu_min_ms'] for x in dl):.1f}, {med(x['chain_restore_cpu_min_ms'] for x in dl):.1f}" if all(dl) else "-")
          + (f" | repeated restore cpu {med(x['restore_warm_cpu_ms'] for x in p):.1f} wall {med(x['restore_warm_ms'] for x in p):.1f}"
             if all("restore_warm_cpu_ms" in x for x in p) else "")
          + (f" | new-session restore cpu {med(x['restore_new_session_cpu_ms'] for x in p):.1f}"
             if all("restore_new_session_cpu_ms" in x for x in p) else "")
          + f" | rows out/in {med(r['rows_read_cpu_min_ms'] for r in rs):.1f}/{med(r['rows_write_cpu_min_ms'] for r in rs):.1f}"
          + f" | prefix cache restore cpu {med(r['prefix_cache']['restore_cpu_ms'] for r in rs):.1f}")
