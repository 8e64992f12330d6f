#!/usr/bin/env bash
# Where a batched decode step's time goes: builds pelican (check.sh build models), then profiles
# `pelican bench --batch B -p $NPP -n $NTG` for each B of $BATCHES under Nsight Systems (CUDA trace) and
# prints the per-kernel GPU time table (nsys stats cuda_gpu_kern_sum), or under Nsight Compute
# (gpu__time_duration.sum per kernel, summed by name) when nsys is missing.
#
#   tools/gpu/batch_profile.sh      # on the GPU machine, from the repository root
#
# Environment (defaults): OUT=./gpu-out  HYBRID (as batch_check.sh: 1 = the Qwen3.5-35B-A3B shape)  TYPES=q4_0
#   BATCHES="8 32"  NPP=8 (short prompts: the profile is mostly decode steps)  NTG=64  TESTS: ctest regex run first
#   BUILD_TARGETS (default: pelican and, with TESTS, everything).
# Logs: $OUT/prof-*.log.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$(pwd)
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
# shellcheck source=tools/gpu/batch_env.sh
. tools/gpu/batch_env.sh
TYPES=${TYPES:-q4_0}
BATCHES=${BATCHES:-8 32}
NPP=${NPP:-8}
NTG=${NTG:-64}
MODEL_DIR=${MODEL_DIR:-/tmp/pelican-models}
say() { echo "[$(date -u +%H:%M:%S)] $*"; }

if [ -z "${BUILD_TARGETS+x}" ] && [ -z "${TESTS:-}" ]; then export BUILD_TARGETS="pelican pelican_cuda"; fi
say "build + models"
BUDGET_S=400 TYPES="$TYPES" DEPTHS="" OUT="$OUT/check" tools/gpu/check.sh build models >"$OUT/prof-check.log" 2>&1
tail -4 "$OUT/prof-check.log"
PELICAN=$ROOT/build-gpu/bin/pelican
[ -x "$PELICAN" ] || { say "no pelican binary"; exit 1; }
if [ -n "${TESTS:-}" ]; then
  say "tests: $TESTS"
  (cd build-gpu && timeout -k 10 240 ctest -R "$TESTS" -j 6 --output-on-failure) >"$OUT/prof-tests.log" 2>&1
  tail -12 "$OUT/prof-tests.log"
fi
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
say "nsys: ${NSYS:-none}  ncu: ${NCU:-none}"
for t in $TYPES; do
  f=$MODEL_DIR/$MODEL_TAG-$t.gguf
  [ -s "$f" ] || { say "missing $f"; continue; }
  for b in $BATCHES; do
    args=(bench --device cuda -m "$f" --batch "$b" -p "$NPP" -n "$NTG")
    log=$OUT/prof-$t-b$b.log
    if [ -n "$NSYS" ]; then
      say "nsys: pelican ${args[*]}"
      timeout -k 10 180 "$NSYS" profile -t cuda -o "/tmp/prof-$t-$b" --force-overwrite true "$PELICAN" "${args[@]}" >"$log" 2>&1
      timeout -k 10 120 "$NSYS" stats -r cuda_gpu_kern_sum -f csv "/tmp/prof-$t-$b.nsys-rep" >"$OUT/prof-$t-b$b.csv" 2>>"$log"
      tail -8 "$log" | grep -E "^\|" || true
      python3 - "$OUT/prof-$t-b$b.csv" "$b" "$NTG" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
if not rows: sys.exit(print("no kernel table"))
h = rows[0]; rows = rows[1:]
ti, ci, ni = h.index("Total Time (ns)"), h.index("Instances"), h.index("Name")
tot = sum(float(r[ti]) for r in rows)
print(f"B={sys.argv[2]}: {tot / 1e6:.1f} ms of kernels; per decode step ~{tot / 1e6 / int(sys.argv[3]):.2f} ms")
for r in sorted(rows, key=lambda r: -float(r[ti]))[:22]:
    print(f"{float(r[ti]) / 1e6:9.2f} ms {100 * float(r[ti]) / tot:5.1f}% {int(r[ci]):7d}x  {r[ni][:110]}")
PY
    elif [ -n "$NCU" ]; then
      # Kernels NCU_SKIP .. NCU_SKIP + NCU_COUNT - 1 (the warm-up run and the measured prefill skipped: about one
      # decode step of the measured run at 600-700 kernels per step), GEMV autotuning off (it would time every
      # variant under the profiler).
      say "ncu: pelican ${args[*]} (-n 4; kernels ${NCU_SKIP:-3300}+${NCU_COUNT:-700})"
      args=(bench --device cuda -m "$f" --batch "$b" -p "$NPP" -n 4)
      PELICAN_GEMV_AUTOTUNE=0 timeout -k 10 200 "$NCU" --metrics gpu__time_duration.sum --csv \
        --launch-skip "${NCU_SKIP:-3300}" --launch-count "${NCU_COUNT:-700}" "$PELICAN" "${args[@]}" >"$log" 2>&1
      python3 - "$log" <<'PY'
import csv, sys, collections
acc = collections.Counter(); cnt = collections.Counter()
for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')):
    if len(r) > 14 and r[-3] == "gpu__time_duration.sum":
        v = float(r[-1].replace(",", "")); u = r[-2]
        acc[r[4][:100]] += v * (1e-3 if u in ("ns", "nsecond") else 1.0 if u in ("us", "usecond") else 1e3)
        cnt[r[4][:100]] += 1
tot = sum(acc.values())
print(f"{tot / 1e3:.1f} ms of kernels")
for k, v in acc.most_common(30): print(f"{v / 1e3:9.3f} ms {100 * v / tot:5.1f}% {cnt[k]:6d}x {k}")
PY
    fi
  done
done
say "done"
