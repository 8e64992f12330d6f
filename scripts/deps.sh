#!/usr/bin/env bash
# Installs pelican's dependencies from Debian packages (idempotent).
#   scripts/deps.sh build   what building pelican needs (scripts/setup.sh)
#   scripts/deps.sh [test]  that, plus the test and tooling packages (scripts/test.sh, CI)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-test}"

PKGS=(build-essential cmake ninja-build pkg-config
      nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev)
if [ "$what" != build ]; then
  PKGS+=(ccache libgtest-dev libgmock-dev libcpp-httplib-dev libhwy-dev libxxhash-dev libbenchmark-dev
         python3 python3-jinja2 clang clang-format libclang-rt-14-dev)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "pelican: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js (transformers.js tokenizer reference for the tests); optional for building pelican.
if [ "$what" != build ] && command -v npm >/dev/null 2>&1 && [ -f tools/tokref/package-lock.json ]; then
  if [ ! -d tools/tokref/node_modules ] || [ tools/tokref/package-lock.json -nt tools/tokref/node_modules ]; then
    npm ci --prefix tools/tokref --no-audit --no-fund --loglevel=error
  fi
fi
