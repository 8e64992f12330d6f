#!/usr/bin/env bash
# Fails when a tracked C++/CUDA file differs from clang-format's output (.clang-format at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "needs clang-format: $f"
    bad=1
  fi
done < <(git ls-files '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh')
[ "$bad" -eq 0 ] && echo "format: all files clean"
exit "$bad"
