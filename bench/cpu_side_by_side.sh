#!/usr/bin/env bash
# pelican bench vs llama.cpp's llama-bench on the same GGUF files, same machine, interleaved.
#
#   LLAMA_BENCH=/path/to/llama-bench bench/cpu_side_by_side.sh [ROUNDS] [THREADS]
#
# Models: a TinyLlama-1.1B-shaped llama (hidden 2048, 22 layers, 32 heads, 4 KV heads, ffn 5632, llama-spm
# vocabulary) written by `pelican convert --synthetic` in Q4_0, Q8_0 and F16 under $WORK (default
# /tmp/pelican-bench). Each round runs, per type, pelican then llama.cpp (pp128, tg64, 3 repetitions each);
# the table reports the median over rounds of each engine's per-round median. llama.cpp itself is not part of
# this repository: build it yourself and point LLAMA_BENCH at its llama-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
WORK=${WORK:-/tmp/pelican-bench}
PELICAN=${PELICAN:-build/bin/pelican}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
mkdir -p "$WORK"
TYPES=(q4_0 q8_0 f16)
for t in "${TYPES[@]}"; do
  f="$WORK/tinyllama-$t.gguf"
  [ -f "$f" ] || "$PELICAN" convert --synthetic llama --config tools/configs/tinyllama-1.1b.json \
                   --vocab models/ggml-vocab-llama-spm.gguf --type "$t" -o "$f"
done
: > "$WORK/results.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for t in "${TYPES[@]}"; do
    f="$WORK/tinyllama-$t.gguf"
    p=$("$PELICAN" bench -m "$f" -p 128 -n 64 -r 3 -t "$THREADS" --json)
    echo "{\"engine\":\"pelican\",\"type\":\"$t\",\"round\":$r,\"result\":$p}" >> "$WORK/results.jsonl"
    l=$("$LLAMA_BENCH" -m "$f" -p 128 -n 64 -r 3 -t "$THREADS" -o json 2>/dev/null)
    echo "{\"engine\":\"llama.cpp\",\"type\":\"$t\",\"round\":$r,\"result\":$(echo "$l" | tr -d '\n')}" >> "$WORK/results.jsonl"
    echo "round $r $t done" >&2
  done
done
python3 - "$WORK/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return statistics.median(xs) if xs else float("nan")
table = {}
for r in rows:
    key = (r["type"], r["engine"])
    d = table.setdefault(key, {"pp": [], "tg": [], "gbps": []})
    if r["engine"] == "pelican":
        d["pp"].append(r["result"]["prefill_tok_s"]); d["tg"].append(r["result"]["decode_tok_s"])
        d["gbps"].append(r["result"]["gbps"])
    else:
        for t in r["result"]:
            s = med(t["samples_ts"])
            (d["pp"] if t["n_prompt"] > 0 else d["tg"]).append(s)
print("| type | pelican pp128 | llama.cpp pp128 | ratio | pelican tg64 | llama.cpp tg64 | ratio | pelican GB/s |")
print("|---|---|---|---|---|---|---|---|")
for t in ("q4_0", "q8_0", "f16"):
    p, l = table.get((t, "pelican")), table.get((t, "llama.cpp"))
    if not p or not l: continue
    pp, lpp, tg, ltg = med(p["pp"]), med(l["pp"]), med(p["tg"]), med(l["tg"])
    print(f"| {t} | {pp:.1f} | {lpp:.1f} | {pp/lpp:.2f} | {tg:.1f} | {ltg:.1f} | {tg/ltg:.2f} | {med(p['gbps']):.1f} |")
PY
