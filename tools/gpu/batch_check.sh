#!/usr/bin/env bash
# Issue 17's GPU call: pelican's build, the many-sequence tests, `pelican bench --batch` and llama.cpp's
# llama-batched-bench side by side on the same synthetic GGUFs (Llama-3.1-8B-shaped by default; HYBRID=1: the
# Qwen3.5-35B-A3B shape), plus the B = 1 regression check (pelican bench -p 512 -n 128).
#
#   tools/gpu/batch_check.sh           # on the GPU machine, from the repository root
#
# Environment (defaults): OUT=./gpu-out  TYPES="q4_0 bf16"  BATCHES=1,8,32,128  NPP=128  NTG=128
#   TESTS: ctest regex of the GPU tests to run (default: the executor, paged attention, sampling, rope, forward ones;
#     all: every test labelled gpu)
#   LLAMA_SRC=third_party/llama.cpp: a trimmed llama.cpp source (34af94c; ignored, carried in the device call),
#     built in the background into /tmp/llama-build (CUDA, sm_90a) unless it is missing; no script here downloads it.
#   SKIP_PEER=1: no llama.cpp.  SKIP_TESTS=1: no ctest.  SKIP_BENCH=1: no pelican bench.  QBENCH=1: cuda_qmatmul_bench --quick as well.
#   HYBRID=1: the Qwen3.5-35B-A3B shape (tools/configs/qwen3.5-35b-a3b.json, files q35b-<type>.gguf, the Qwen3
#     vocabulary third_party/vocab/qwen3-tokenizer.json.xz); default TYPES then q4_0.
#   BUILD_TARGETS: ninja targets (default: everything; check.sh).
# Logs: $OUT/batch-*.log, one per step; a summary at the end.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# shellcheck source=tools/gpu/batch_env.sh
. tools/gpu/batch_env.sh
[ -n "${HYBRID:-}" ] && TYPES=${TYPES:-q4_0}
TYPES=${TYPES:-q4_0 bf16}
BATCHES=${BATCHES:-1,8,32,128}
NPP=${NPP:-128}
NTG=${NTG:-128}
TESTS=${TESTS:-'CudaExecutor|CudaPagedAttention|CudaSamplingBatch|CudaSampling|CudaRopeStore|CudaArch|CudaTypes|CudaQmatmul'}
LLAMA_SRC=${LLAMA_SRC:-third_party/llama.cpp}
LLB=/tmp/llama-build
MODEL_DIR=${MODEL_DIR:-/tmp/pelican-models}
ts() { date -u +%H:%M:%S; }
say() { echo "[$(ts)] $*"; }
T0=$(date +%s)

# llama.cpp in the background (its build takes ~6 minutes on 16 cores).
if [ -z "${SKIP_PEER:-}" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ]; then
  (
    cmake -S "$LLAMA_SRC" -B "$LLB" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DCMAKE_BUILD_TYPE=Release && nice -n 5 cmake --build "$LLB" -j "$(nproc)" --target llama-batched-bench llama-bench
    echo "rc=$?"
    touch "$LLB.done"
  ) >"$OUT/batch-llama-build.log" 2>&1 &
fi

say "build + models"
BUDGET_S=400 TYPES="$TYPES" DEPTHS="" OUT="$OUT/check" tools/gpu/check.sh build models >"$OUT/batch-check.log" 2>&1
tail -5 "$OUT/batch-check.log"
PELICAN=$ROOT/build-gpu/bin/pelican
[ -x "$PELICAN" ] || { say "no pelican binary"; exit 1; }

if [ -z "${SKIP_TESTS:-}" ]; then
  say "tests: $TESTS"
  if [ "$TESTS" = all ]; then sel=(-L gpu); else sel=(-R "$TESTS"); fi
  (cd build-gpu && timeout -k 10 300 ctest "${sel[@]}" -j 6 --output-on-failure) >"$OUT/batch-tests.log" 2>&1
  tail -15 "$OUT/batch-tests.log"
  grep -h "worst\|cuda executor" build-gpu/Testing/Temporary/LastTest.log 2>/dev/null | head -20
fi

if [ -n "${QBENCH:-}" ]; then
  say "cuda_qmatmul_bench --quick"
  timeout -k 10 90 build-gpu/bin/cuda_qmatmul_bench --quick --types q4_0,q6_k --tok 16,64,128,256 --sweep >"$OUT/batch-qbench.log" 2>&1
  tail -60 "$OUT/batch-qbench.log"
fi

for t in $TYPES; do
  [ -n "${SKIP_BENCH:-}" ] && break
  f=$MODEL_DIR/$MODEL_TAG-$t.gguf
  [ -s "$f" ] || { say "missing $f"; continue; }
  say "pelican bench --batch $BATCHES on $t (nvidia-smi: $(nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null))"
  timeout -k 10 240 "$PELICAN" bench --device cuda -m "$f" --batch "$BATCHES" -p "$NPP" -n "$NTG" \
    >"$OUT/batch-pelican-$t.log" 2>&1
  tail -8 "$OUT/batch-pelican-$t.log"
  if [ "$t" = q4_0 ]; then
    say "pelican bench -p 512 -n 128 (B = 1, the single-sequence pass)"
    timeout -k 10 120 "$PELICAN" bench --device cuda -m "$f" -p 512 -n 128 -r 3 2>&1 | tail -4
  fi
done

if [ -z "${SKIP_PEER:-}" ] && [ -f "$LLAMA_SRC/CMakeLists.txt" ]; then
  w=0
  while [ ! -e "$LLB.done" ] && [ $w -lt 420 ]; do sleep 5; w=$((w + 5)); done
  say "llama.cpp build waited ${w}s; $(tail -1 "$OUT/batch-llama-build.log")"
  for t in $TYPES; do
    f=$MODEL_DIR/$MODEL_TAG-$t.gguf
    [ -s "$f" ] && [ -x "$LLB/bin/llama-batched-bench" ] || continue
    say "llama-batched-bench on $t"
    timeout -k 10 240 "$LLB/bin/llama-batched-bench" -m "$f" -npp "$NPP" -ntg "$NTG" -npl "$BATCHES" -ngl 99 -fa 1 \
      -c $(( (NPP + NTG + 1) * 128 + 512 )) -b 2048 -ub 512 >"$OUT/batch-llama-$t.log" 2>&1
    grep -E "^\|" "$OUT/batch-llama-$t.log" | tail -8
  done
fi
say "done in $(( $(date +%s) - T0 )) s"
