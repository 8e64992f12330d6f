#!/usr/bin/env python3
"""Side-by-side markdown table for tools/gpu/check.sh (robust to missing results: gaps print as "-").

usage: table.py RESULTS.jsonl MODEL_DIR "TYPES" "DEPTHS"

RESULTS.jsonl lines: {"engine": "pelican"|"llama.cpp", "type": T, "depth": D, "result": ...}; pelican results
are `pelican bench --json` objects (one per depth), llama.cpp results are `llama-bench -o json` arrays.
Speeds are tok/s: pelican's median over repetitions; llama.cpp's median of samples_ts (avg_ts if absent).
"""
import json
import os
import statistics
import sys


def load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def num(x):
    return x if isinstance(x, (int, float)) and x == x and x > 0 else None


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b is not None else "-"


def depth_label(d):
    return f"{d // 1024}K" if d % 1024 == 0 else str(d)


def main():
    results, model_dir = sys.argv[1], sys.argv[2]
    types = sys.argv[3].split() if len(sys.argv) > 3 else ["bf16", "q8_0", "q4_0", "q4_k"]
    depths = [int(d) for d in sys.argv[4].split()] if len(sys.argv) > 4 else [4096, 32768]
    tag = sys.argv[5] if len(sys.argv) > 5 else "llama8b"
    pp = sys.argv[6] if len(sys.argv) > 6 else "512"
    pel = {}  # (type, "pp"|depth) -> tok/s ; (type, "roof") -> %
    ref = {}
    size = {}
    for r in load(results):
        t, res = r.get("type"), r.get("result")
        if r.get("engine") == "pelican" and isinstance(res, dict):
            d = int(r.get("depth", res.get("depth", 0)) or 0)
            pel[(t, d)] = num(res.get("decode_tok_s"))
            if d == 0:
                pel[(t, "pp")] = num(res.get("prefill_tok_s"))
                pel[(t, "roof")] = num(res.get("roofline_pct"))
            if num(res.get("model_bytes")):
                size.setdefault(t, res["model_bytes"])
        elif r.get("engine") == "llama.cpp" and isinstance(res, list):
            for e in res:
                if not isinstance(e, dict):
                    continue
                s = [x for x in e.get("samples_ts") or [] if num(x)]
                v = statistics.median(s) if s else num(e.get("avg_ts"))
                if e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
                    ref[(t, "pp")] = v
                elif e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
                    ref[(t, int(e.get("n_depth", 0) or 0))] = v
    for t in types:
        p = os.path.join(model_dir, f"{tag}-{t}.gguf")
        if os.path.exists(p):
            size[t] = os.path.getsize(p)

    cols = [0] + depths
    tg = ["tg128"] + [f"tg@{depth_label(d)}" for d in depths]
    head = ["type", "GiB", f"pp{pp}"] + tg + ["% roof"]
    head += [f"l.cpp pp{pp}"] + [f"l.cpp {x}" for x in tg] + ["pp ×"] + [f"{x} ×" for x in tg]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in types:
        row = [t, fmt(size[t] / 2**30, 2) if t in size else "-", fmt(pel.get((t, "pp")))]
        row += [fmt(pel.get((t, d))) for d in cols]
        row += [fmt(pel.get((t, "roof")), 0)]
        row += [fmt(ref.get((t, "pp")))] + [fmt(ref.get((t, d))) for d in cols]
        row += [ratio(pel.get((t, "pp")), ref.get((t, "pp")))]
        row += [ratio(pel.get((t, d)), ref.get((t, d))) for d in cols]
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append(
        f"tok/s; pelican `bench --device cuda -p {pp} -n 128 [-d D]`, llama.cpp `llama-bench -fa 1 -ngl 99`; "
        "× = pelican / llama.cpp; % roof = pelican tg128 GB/s over its measured read roofline."
    )
    print("\n".join(out))


if __name__ == "__main__":
    main()
