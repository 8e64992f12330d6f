#!/usr/bin/env bash
# Fresh machine → Release build of pelican in build/ (binary: build/bin/pelican).
#   scripts/setup.sh                    install the Debian packages the build needs (apt) and build
#   PELICAN_CUDA=ON scripts/setup.sh    also build the CUDA backend where no GPU is visible
#   PELICAN_CUDA=OFF scripts/setup.sh   never build it
# By default (AUTO) the CUDA backend is built only when nvcc is installed and a GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPELICAN_CUDA="${PELICAN_CUDA:-AUTO}" \
      -DPELICAN_WERROR="${PELICAN_WERROR:-OFF}" >/dev/null
cmake --build build --target pelican -j "$(nproc)"
echo "pelican: built build/bin/pelican"
