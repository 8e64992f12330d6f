#!/usr/bin/env bash
# Builds everything (tests included) in build/ and runs ctest.
#   scripts/test.sh                 all tests
#   scripts/test.sh -R tokenizer    extra arguments go to ctest
# PELICAN_CUDA=ON also compiles the CUDA backend and its tests where no GPU is visible (they skip).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELICAN_CUDA="${PELICAN_CUDA:-AUTO}" \
      -DPELICAN_WERROR="${PELICAN_WERROR:-OFF}" -DPELICAN_TESTS=ON >/dev/null
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
