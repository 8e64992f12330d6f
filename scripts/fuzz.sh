#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (whole library instrumented for coverage + ASan/UBSan)
# and runs one fuzzer for N seconds on a scratch copy of its corpus.
#
#   scripts/fuzz.sh gguf 600          # fuzz tests/fuzz/corpus/gguf for 10 minutes
#   BUILD_DIR=build-fuzz-x JOBS=2 scripts/fuzz.sh gguf 60
#   MERGE=1 scripts/fuzz.sh gguf 600  # afterwards, merge new coverage back into the committed corpus
#
# Crashes are written to fuzz-out/<name>/ (crash-*, leak-*, timeout-*); copy a reproducer into
# tests/fuzz/corpus/<name>/ once fixed so ctest's fuzz_regress.<name> replays it.
set -euo pipefail

name=${1:?usage: scripts/fuzz.sh NAME SECONDS}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${BUILD_DIR:-$root/build-fuzz}")
jobs=${JOBS:-1}
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g -O1"

if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DPELICAN_CUDA=OFF -DPELICAN_FUZZ=ON \
    -DPELICAN_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san"
fi
ninja -C "$build" -j"${NINJA_JOBS:-2}" "${name}_fuzzer"

corpus=$root/tests/fuzz/corpus/$name
out=$root/fuzz-out/$name
mkdir -p "$out/work"
cp -n "$corpus"/* "$out/work/" 2>/dev/null || true

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
par=()
[[ $jobs -gt 1 ]] && par=(-jobs="$jobs" -workers="$jobs")  # workers log to fuzz-<i>.log in $out
set +e
(cd "$out" && "$build/bin/${name}_fuzzer" "$out/work" "$corpus" -max_total_time="$secs" "${par[@]}" \
  -artifact_prefix="$out/" -max_len="${MAX_LEN:-65536}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  >"$out/log.txt" 2>&1)
rc=$?
set -e
grep -hE "DONE|ERROR|SUMMARY|stat::number_of_executed_units|Test unit written" "$out"/log.txt "$out"/fuzz-*.log \
  2>/dev/null || true
echo "fuzzer exit code $rc; full log in $out/log.txt"

if [[ ${MERGE:-0} == 1 ]]; then
  mkdir -p "$out/merged"
  "$build/bin/${name}_fuzzer" -merge=1 "$out/merged" "$corpus" "$out/work" >/dev/null 2>&1
  echo "merged corpus: $(ls "$out/merged" | wc -l) files in $out/merged"
fi
exit $rc
