#!/usr/bin/env bash
# The whole training pipeline on the GPU machine, in one call (~8 minutes on one H200):
#   code corpus from this machine's site-packages -> tokenizer -> pelican-tiny -> pelican-small-moe.
# Needs tools/train/data/english_*.jsonl.xz (made here by corpus.py english; carried to the device).
# Usage: OUT=/path/to/results bash tools/train/run_all.sh [train.py options, e.g. --tiny-steps 2100]
set -euo pipefail
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd)
export OUT=${OUT:-/tmp/pelican-train-out}
export WORK=${WORK:-/tmp/pelican-train}
mkdir -p "$OUT" "$WORK/data"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
cp "$HERE"/data/english_train.jsonl.xz "$HERE"/data/english_heldout.jsonl.xz "$HERE"/data/english_manifest.json "$WORK/data/"
time python3 "$HERE/corpus.py" code --out "$WORK/data"
python3 "$HERE/train.py" --data "$WORK/data" --work "$WORK" "$@"
bash "$HERE/pack.sh" moe
python3 "$HERE/summary.py" "$WORK/results.json"
