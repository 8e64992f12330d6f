#!/usr/bin/env python3
"""Prints the short summary table of a training run's results.json."""
import json
import sys

r = json.load(open(sys.argv[1]))
print(f"\n{'model':18s} {'params':>10s} {'active':>10s} {'steps':>6s} {'tokens':>12s} {'train s':>8s} "
      f"{'ppl en':>8s} {'ppl code':>8s} {'bpb en':>7s} {'bpb code':>8s} {'mtp@t+2 en':>10s} {'code':>6s}")
for name in ("tiny", "moe"):
    m = r.get(name)
    if not m:
        print(f"{name:18s} FAILED: {r.get(name + '_error')}")
        continue
    h = m["heldout"]
    p = m.get("params", m.get("params_total"))
    a = m.get("params_active_main", p)
    mt = [h[s].get("mtp_top1_t2") for s in ("english", "code")]
    print(f"{name:18s} {p:10d} {a:10d} {m['steps']:6d} {m['tokens_seen']:12d} {m['train_seconds']:8.1f} "
          f"{h['english']['ppl']:8.2f} {h['code']['ppl']:8.2f} {h['english']['bits_per_byte']:7.3f} "
          f"{h['code']['bits_per_byte']:8.3f} " + " ".join(f"{x:10.3f}" if x is not None else f"{'-':>10s}" for x in mt))
print("total seconds", round(r.get("total_seconds", 0), 1))
