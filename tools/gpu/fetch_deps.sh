#!/usr/bin/env bash
# Run HERE (the dev machine, which has apt): downloads the Debian -dev packages pelican builds
# against into third_party/debs (ignored), for the GPU machine, whose image has no apt access.
# Carry third_party/debs in the device call; tools/gpu/check.sh unpacks them (tools/gpu/deps_env.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p third_party/debs
cd third_party/debs
apt-get download libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libfmt-dev libfmt9 \
  nlohmann-json3-dev libcli11-dev libgtest-dev googletest
ls -l
