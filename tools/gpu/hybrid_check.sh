#!/usr/bin/env bash
# Issue 6 on the GPU machine: the hybrid Qwen3.5 GPU pass checked and measured (tools/gpu/check.sh does
# the building, the side-by-side phases and the table; this script points it at the hybrid shapes).
#
#   tools/gpu/hybrid_check.sh [PHASE...]     phases: build test sanitize models bench peer table big [ab]
#
#   test      the hybrid GPU tests (cuda_deltanet, cuda_moe, cuda_moe_experts, cuda_moe_block, cuda_moe_fused,
#             cuda_moe_mma, cuda_hybrid_golden) and the ops they use (elementwise, attention, rope_store)
#   sanitize  compute-sanitizer memcheck + racecheck on cuda_deltanet_test, cuda_moe_test,
#             cuda_moe_experts_test and cuda_moe_block_test (small mode)
#   models    Qwen3.5-35B-A3B-shaped GGUFs (tools/configs/qwen3.5-35b-a3b.json) in $TYPES, written by
#             pelican convert --synthetic qwen3_5_moe (~20 GB each for Q4_0 / Q4_K)
#   bench/peer/table   check.sh's phases on those files: pelican bench --device cuda and llama-bench
#             (LLAMA_BENCH / LLAMA_BENCH_DONE / LLAMA_BUILD_LOG as for check.sh), pp$PP, tg128 at depth 0
#             and $DEPTHS
#   moe       cuda_moe_bench: the one-kernel decode MoE block against the three-kernel chain, 35B and 122B
#             expert shapes in Q4_0 and Q4_K (MOE_SHAPES, MOE_TYPES), with the kernel's phase stamps
#   ab        A/B of the PELICAN_* switches of the hybrid pass (AB_SWITCHES, AB_DEPTH) on the first type's file
#   big       Qwen3.5-122B-A10B shape (~70 GB in Q4_0: more than the disk) generated into memory:
#             pelican bench --device cuda --synthetic qwen3_5_moe --config tools/configs/qwen3.5-122b-a10b.json
#             -p $PP -n 128 -d 0,$BIG_DEPTHS (BIG_DEPTHS default none; e.g. 32768): the model written into
#             memory once (~130 s), one bench per depth
#
# Environment: as check.sh, with defaults TYPES="q4_0 q4_k" DEPTHS="32768" PP=4096 REPS=2,
#   VOCAB=third_party/vocab/qwen3-tokenizer.json.xz (the Qwen3 tokenizer.json; vocab_size 248320 pads it),
#   BIG_TYPE=q4_0, BIG_TIMEOUT=540 (s) per run, BIG_DEPTHS="" (decode depths of extra 122B runs).
# Logs: $OUT/<phase>.log as check.sh; the big phase's JSON result ends big.log.
# shellcheck disable=SC2317  # phase_* functions are called indirectly ("phase_$p")
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
# shellcheck source=tools/gpu/deps_env.sh
. tools/gpu/deps_env.sh
export SYNTH_ARCH=qwen3_5_moe MODEL_TAG=q35b
export CONFIG=${CONFIG:-$(pwd)/tools/configs/qwen3.5-35b-a3b.json}
export TYPES=${TYPES:-q4_0 q4_k} DEPTHS=${DEPTHS:-4096 32768} PP=${PP:-4096} REPS=${REPS:-2}
export VOCAB=${VOCAB:-third_party/vocab/qwen3-tokenizer.json.xz}
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export OUT
BUILD_DIR=${BUILD_DIR:-build-gpu}
BIG_TYPE=${BIG_TYPE:-q4_0}
BIG_TIMEOUT=${BIG_TIMEOUT:-540}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
HYBRID_TESTS="cuda_deltanet_test cuda_deltanet_fold_test cuda_moe_test cuda_moe_experts_test cuda_moe_block_test cuda_moe_fused_test cuda_moe_mma_test cuda_hybrid_golden_test cuda_elementwise_test cuda_attention_test cuda_rope_store_test"

say() { echo "[$(date -u +%H:%M:%S)] $*"; }

phase_test() {
  local t rc=0
  for t in $HYBRID_TESTS; do
    echo "== $t"
    timeout -k 10 300 "$BUILD_DIR/bin/$t" --gtest_brief=1 || { echo "-- $t FAILED (exit $?)"; rc=1; }
  done
  echo "== cuda_attention_test with PELICAN_ATTN_COMBINE2=0 (the one-level combine above 8 splits)"
  PELICAN_ATTN_COMBINE2=0 timeout -k 10 300 "$BUILD_DIR/bin/cuda_attention_test" --gtest_brief=1 ||
    { echo "-- cuda_attention_test (one-level combine) FAILED (exit $?)"; rc=1; }
  return "$rc"
}

phase_sanitize() {
  local t tool rc=0
  for t in cuda_deltanet_test cuda_moe_test cuda_moe_experts_test cuda_moe_block_test; do
    for tool in memcheck racecheck; do
      echo "== $tool $t (PELICAN_CUDA_TEST_SMALL=1)"
      PELICAN_CUDA_TEST_SMALL=1 timeout -k 10 300 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        --print-limit 10 "$BUILD_DIR/bin/$t" --gtest_brief=1 || { echo "-- $tool $t FAILED (exit $?)"; rc=1; }
    done
  done
  return "$rc"
}

# A/B of the hybrid switches on the first of $TYPES (models phase first): pp$PP / tg128 at depth 0 and
# AB_DEPTH, one line of JSON per run in ab.log; AB_SWITCHES: space-separated VAR=VALUE settings ("-" is
# the default configuration).
phase_ab() {
  local t f sw d rc=0
  t=${TYPES%% *}
  f=${MODEL_DIR:-/tmp/pelican-models}/$MODEL_TAG-$t.gguf
  [ -s "$f" ] || { echo "missing $f (run the models phase)"; return 1; }
  # shellcheck disable=SC2086  # the switch list splits on spaces
  for sw in ${AB_SWITCHES:-- PELICAN_ATTN_ROW_BLOCKS=0 PELICAN_ATTN_COMBINE2=0 PELICAN_HYBRID_CHUNK=0 PELICAN_MOE_GROUPED=0 PELICAN_MOE_MMA=0 PELICAN_DN_CHUNKED=0 PELICAN_FUSED_ROUTER=0 PELICAN_FUSED_COMBINE=0 PELICAN_FUSED_MOE=0 PELICAN_FUSED_ROUTE=0 PELICAN_DN_CONV_FOLD=0}; do
    for d in 0 "${AB_DEPTH:-4096}"; do
      echo "== $sw depth $d"
      if [ "$sw" = - ]; then
        timeout -k 10 "$BENCH_TIMEOUT" "$BUILD_DIR/bin/pelican" bench --device cuda -m "$f" -p "$PP" -n 128 -r 1 -d "$d" --json || rc=1
      else
        env "$sw" timeout -k 10 "$BENCH_TIMEOUT" "$BUILD_DIR/bin/pelican" bench --device cuda -m "$f" -p "$PP" -n 128 -r 1 -d "$d" --json || rc=1
      fi
      echo
    done
  done
  return "$rc"
}

phase_big() {
  local vocab=$VOCAB
  case $vocab in
    *.xz)
      mkdir -p "${MODEL_DIR:-/tmp/pelican-models}"
      local dst=${MODEL_DIR:-/tmp/pelican-models}/qwen3-tokenizer.json
      [ -s "$dst" ] || python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o, 1 << 22)' "$vocab" "$dst"
      vocab=$dst ;;
  esac
  free -g
  local d depths=0
  for d in ${BIG_DEPTHS:-}; do depths=$depths,$d; done
  # One generation of the model, one bench per depth (one JSON line each).
  timeout -k 10 "$BIG_TIMEOUT" "$BUILD_DIR/bin/pelican" bench --device cuda --synthetic qwen3_5_moe \
    --config tools/configs/qwen3.5-122b-a10b.json --vocab "$vocab" --type "$BIG_TYPE" -p "$PP" -n 128 -r 1 \
    -d "$depths" --json
}

# The decode MoE block alone: cuda_moe_bench (fused kernel against the three-kernel chain) on the 35B and
# 122B expert shapes, with the fused kernel's phase stamps (MOE_SHAPES, MOE_TYPES).
phase_moe() {
  local sh t rc=0
  for sh in ${MOE_SHAPES:-35b 122b}; do
    for t in ${MOE_TYPES:-q4_0 q4_k}; do
      echo "== cuda_moe_bench --shape $sh --type $t --trace"
      timeout -k 10 120 "$BUILD_DIR/bin/cuda_moe_bench" --shape "$sh" --type "$t" --trace || rc=1
    done
  done
  return "$rc"
}

ALL=(build test sanitize models bench peer table big)  # ab, moe: on request only
if [ $# -gt 0 ]; then PHASES=("$@"); else PHASES=("${ALL[@]}"); fi
rc=0
for p in "${PHASES[@]}"; do
  case $p in
    build | models | bench | peer | table)
      tools/gpu/check.sh "$p" || rc=1 ;;
    test | sanitize | big | ab | moe)
      t0=$SECONDS
      (set -e; "phase_$p") >"$OUT/$p.log" 2>&1
      st=$?
      [ "$st" = 0 ] || rc=1
      say "$p $([ "$st" = 0 ] && echo ok || echo "FAILED (exit $st)") ($((SECONDS - t0))s) -> $OUT/$p.log" ;;
    *)
      echo "hybrid_check.sh: unknown phase '$p' (phases: ${ALL[*]})" >&2
      exit 2 ;;
  esac
done
exit "$rc"
