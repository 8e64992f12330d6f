#!/usr/bin/env bash
# Builds everything (tests included) in build/ and runs ctest.
#   scripts/test.sh                 all tests
#   scripts/test.sh -R tokenizer    extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELICAN_CUDA="${PELICAN_CUDA:-ON}" \
      -DPELICAN_WERROR="${PELICAN_WERROR:-OFF}" -DPELICAN_TESTS=ON >/dev/null
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
