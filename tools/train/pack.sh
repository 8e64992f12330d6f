#!/usr/bin/env bash
# Copies finished results from $WORK into $OUT (the device tool returns at most 8 files of 16 MiB).
set -euo pipefail
case "$1" in
  tiny)
    tar -C "$WORK" -cf "$OUT/tiny.tar" pelican-tiny tiny-ref tokenizer tokenizer_ref.json results.json \
      data/code_manifest.json data/english_manifest.json ;;
  moe)
    cp "$WORK/results.json" "$OUT/results.json"
    cp "$WORK/tokenizer/tokenizer.json" "$OUT/tokenizer.json"
    if [ -d "$WORK/pelican-small-moe" ]; then
      tar -C "$WORK" -cf - pelican-small-moe | split -b 15000000 - "$OUT/moe.tar.part-"
    fi ;;
esac
ls -la "$OUT"
