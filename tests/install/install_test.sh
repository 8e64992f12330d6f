#!/usr/bin/env bash
# ctest: the three ways a pelican binary finds its bundled default model, and the installed API.
#   install_test.sh BUILD_DIR SOURCE_DIR
# 1. cmake --install into a temporary prefix; the installed binary runs without -m from an unrelated
#    folder (PREFIX/share/pelican/models) and gives the build tree's greedy text;
# 2. a program compiled against the installed headers and library (pkg-config pelican) loads the
#    installed model through the C++ API and generates;
# 3. a copy of the built binary outside any tree (an out-of-tree build's situation) finds the source
#    tree's models; the in-tree case is PelicanTiny.RunWithoutModelUsesBundledDefault.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

prompt="The history of"
want=$(cd "$tmp" && "$build/bin/pelican" run -m "$src/models/pelican-tiny.gguf" -p "$prompt" -n 6 --temp 0 -t 1 2>/dev/null)
[ -n "$want" ] || fail "the build tree's binary printed nothing"

# 1. installed
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
[ -f "$tmp/prefix/share/pelican/models/pelican-tiny.gguf" ] || fail "the model was not installed"
mkdir -p "$tmp/elsewhere"
got=$(cd "$tmp/elsewhere" && env -u PELICAN_MODELS_DIR "$tmp/prefix/bin/pelican" run -p "$prompt" -n 6 --temp 0 -t 1 2>"$tmp/err1") ||
  fail "installed binary failed: $(cat "$tmp/err1")"
[ "$got" = "$want" ] || fail "installed binary: '$got' != '$want'"

# 2. the C++ API from the installed headers
cat > "$tmp/api.cpp" <<'CPP'
#include <pelican/engine.h>
#include <cstdio>
int main(int argc, char** argv) {
    auto engine = pelican::Engine::load(argv[1]);
    if (!engine) { std::fprintf(stderr, "%s\n", engine.error().message.c_str()); return 1; }
    auto session = (*engine)->create_session({.n_ctx = 64, .n_threads = 1});
    if (!session) return 2;
    pelican::GenerateParams gp;
    gp.max_tokens = 6;
    gp.sampling.temperature = 0;
    auto r = (*session)->generate(std::string_view(argv[2]), gp);
    if (!r) { std::fprintf(stderr, "%s\n", r.error().message.c_str()); return 3; }
    std::fputs(r->text.c_str(), stdout);
    return 0;
}
CPP
pcdir=$(dirname "$(find "$tmp/prefix" -name pelican.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
# shellcheck disable=SC2046
c++ -std=c++20 -o "$tmp/api" "$tmp/api.cpp" $(pkg-config --cflags --libs pelican) || fail "compiling against the installed API failed"
api=$("$tmp/api" "$tmp/prefix/share/pelican/models/pelican-tiny.gguf" "$prompt") || fail "the API program failed"
[ "$api" = "$want" ] || fail "API: '$api' != '$want'"

# 3. a binary outside the source tree (out-of-tree build): the configured source tree's models
mkdir -p "$tmp/oot/bin"
cp "$build/bin/pelican" "$tmp/oot/bin/"
got=$(cd "$tmp/elsewhere" && env -u PELICAN_MODELS_DIR "$tmp/oot/bin/pelican" run -p "$prompt" -n 6 --temp 0 -t 1 2>"$tmp/err3") ||
  fail "out-of-tree binary failed: $(cat "$tmp/err3")"
[ "$got" = "$want" ] || fail "out-of-tree binary: '$got' != '$want'"

# PELICAN_MODELS_DIR wins, and a wrong one is reported with every place looked at.
mkdir -p "$tmp/models"
cp "$src/models/pelican-tiny.gguf" "$tmp/models/"
got=$(cd "$tmp/elsewhere" && PELICAN_MODELS_DIR="$tmp/models" "$tmp/prefix/bin/pelican" run -p "$prompt" -n 6 --temp 0 -t 1 2>/dev/null)
[ "$got" = "$want" ] || fail "PELICAN_MODELS_DIR: '$got' != '$want'"
echo "install_test: installed, API and out-of-tree binaries all find the default model"
