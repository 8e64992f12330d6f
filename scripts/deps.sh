#!/usr/bin/env bash
# Installs pelican's build and test dependencies from Debian packages (idempotent).
set -euo pipefail

PKGS=(build-essential cmake ninja-build ccache pkg-config
      nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev
      libgtest-dev libgmock-dev libcpp-httplib-dev libhwy-dev libxxhash-dev libbenchmark-dev
      python3 python3-jinja2 clang clang-format libclang-rt-14-dev)

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
if command -v npm >/dev/null 2>&1 && [ -f tools/tokref/package-lock.json ]; then
  if [ ! -d tools/tokref/node_modules ] || [ tools/tokref/package-lock.json -nt tools/tokref/node_modules ]; then
    npm ci --prefix tools/tokref --no-audit --no-fund --loglevel=error
  fi
fi
