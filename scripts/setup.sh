#!/usr/bin/env bash
# Fresh machine → Release build of pelican in build/ (binary: build/bin/pelican).
#   scripts/setup.sh            install Debian packages (apt) and build
#   PELICAN_CUDA=OFF scripts/setup.sh   CPU-only build even when nvcc exists
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELICAN_CUDA="${PELICAN_CUDA:-ON}" \
      -DPELICAN_WERROR="${PELICAN_WERROR:-OFF}" >/dev/null
cmake --build build --target pelican -j "$(nproc)"
echo "pelican: built build/bin/pelican"
